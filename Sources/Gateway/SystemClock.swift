#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore

/// The gateway's wall clock in Unix milliseconds, the one place that asks the system for the date.
public enum SystemClock {
    public static func now() -> UnixMillis {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UnixMillis(ts.tv_sec) * 1000 + UnixMillis(ts.tv_nsec / 1_000_000)
    }
}
