internal import CDBus
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// libdbus's timeouts (one per call awaiting a reply, mostly) as deadlines on one clock, so a connection
/// needs a single kernel timer armed at the earliest of them instead of a timer of its own per timeout.
///
/// A libdbus timeout repeats every `interval` until it is disabled or removed; ``expired(at:)`` hands out
/// the ones due and moves each to its next deadline. Times are plain nanoseconds of a monotonic clock,
/// so the rules can be checked with made-up instants.
struct TimeoutSchedule<Key: Hashable> {
    private var entries: [Key: (deadline: Int64, interval: Int64)] = [:]

    var isEmpty: Bool { entries.isEmpty }

    /// Starts (or restarts) `key`'s countdown of `intervalNanoseconds` at `now`.
    mutating func set(_ key: Key, intervalNanoseconds: Int64, now: Int64) {
        let interval = max(1, intervalNanoseconds)
        entries[key] = (now.addingReportingOverflow(interval).overflow ? .max : now + interval, interval)
    }

    mutating func remove(_ key: Key) {
        entries.removeValue(forKey: key)
    }

    /// When the timer must fire next; nil: no timeout is running, the timer stays disarmed.
    var earliest: Int64? { entries.values.lazy.map(\.deadline).min() }

    /// The timeouts due at `now`, each moved on to its next deadline (after `now`, so a late wake-up
    /// does not fire a timeout twice).
    mutating func expired(at now: Int64) -> [Key] {
        var due: [Key] = []
        for (key, entry) in entries where entry.deadline <= now {
            due.append(key)
            let next = now.addingReportingOverflow(entry.interval)
            entries[key] = (next.overflow ? .max : next.partialValue, entry.interval)
        }
        return due
    }
}

extension TimeoutSchedule {
    func contains(_ key: Key) -> Bool { entries[key] != nil }
}

/// The kernel timer behind a connection's ``TimeoutSchedule``: a timerfd watched by a Dispatch read
/// source on the connection's queue, armed at an absolute deadline. Arming, moving and disarming it are
/// a `timerfd_settime` each, made on the queue. Should no timerfd be available, one Dispatch timer
/// stands in (moving it goes through Dispatch's event thread, but the timeouts still run).
final class TimeoutTimer {
    private let fd: Int32
    private let source: (any DispatchSourceRead)?
    private let standIn: (any DispatchSourceTimer)?
    private var armed: Int64?

    /// Nanoseconds of CLOCK_MONOTONIC, the clock the timerfd runs on.
    static func now() -> Int64 {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_nsec)
    }

    init(queue: DispatchQueue, handler: @escaping @Sendable () -> Void) {
        let fd = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK) | Int32(TFD_CLOEXEC))
        self.fd = fd
        if fd >= 0 {
            let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            source.setEventHandler(handler: handler)
            source.setCancelHandler { _ = Glibc.close(fd) }
            source.resume()
            self.source = source
            standIn = nil
        } else {
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.setEventHandler(handler: handler)
            timer.schedule(deadline: .distantFuture)
            timer.resume()
            standIn = timer
            source = nil
        }
    }

    /// Fires at `deadline` (CLOCK_MONOTONIC nanoseconds; one in the past fires at once), or never when nil.
    func arm(at deadline: Int64?) {
        guard deadline != armed else { return }
        armed = deadline
        if fd >= 0 {
            var spec = itimerspec()
            if let deadline {
                // An all-zero value would disarm the timer instead.
                let at = max(1, deadline)
                spec.it_value = timespec(tv_sec: Int(at / 1_000_000_000), tv_nsec: Int(at % 1_000_000_000))
            }
            _ = timerfd_settime(fd, Int32(TFD_TIMER_ABSTIME), &spec, nil)
        } else if let standIn {
            if let deadline {
                standIn.schedule(deadline: .now() + .nanoseconds(Int(max(0, min(deadline - Self.now(), Int64(Int32.max) * 1_000_000)))))
            } else {
                standIn.schedule(deadline: .distantFuture)
            }
        }
    }

    /// Called from the handler: takes the expiry in, so the timer is disarmed until armed again.
    func expired() {
        armed = nil
        guard fd >= 0 else { return }
        var count: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &count) { Glibc.read(fd, $0.baseAddress, 8) }
    }

    /// Stops the timer for good (the source's cancel handler closes the timerfd).
    func close() {
        source?.cancel()
        standIn?.cancel()
    }
}
