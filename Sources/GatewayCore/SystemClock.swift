#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The gateway's wall clock, in Unix milliseconds: the date and time that readings, events, acknowledgements
/// and status carry. Every layer that stamps a time asks this one source (or a `() -> UnixMillis` passed in,
/// which tests fix). Monotonic time for timeouts and backoff is a different thing: see `SessionClock`.
public enum SystemClock {
    public static func now() -> UnixMillis {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UnixMillis(ts.tv_sec) * 1000 + UnixMillis(ts.tv_nsec / 1_000_000)
    }
}
