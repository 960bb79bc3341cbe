#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The gateway's wall clock, in Unix milliseconds: the date and time that readings, events, acknowledgements
/// and status carry. Every layer that stamps a time asks this one source (or a `() -> UnixMillis` passed in,
/// which tests fix). Monotonic time for timeouts and backoff is a different thing: see `SessionClock`.
/// (`UnixMillis`, the domain's name for these numbers, is GatewayCore's alias of `Int64`.)
public enum SystemClock {
    public static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec / 1_000_000)
    }
}
