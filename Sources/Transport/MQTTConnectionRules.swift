#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// The wait before the next connection attempt.
///
/// Waits double from 0.5 s up to 30 s. They start again from 0.5 s only after a connection that lived
/// `stable` (60 s): a broker that accepts each connection and drops it at once (CONNACK 0, then close)
/// would otherwise be reconnected twice a second for ever, each time with the whole retained set.
struct ReconnectBackoff: Sendable, Equatable {
    static let first: Duration = .milliseconds(500)
    static let longest: Duration = .seconds(30)
    static let stable: Duration = .seconds(60)
    /// After a refusal (bad credentials) the broker is asked again at most every 30 s.
    static let afterRefusal: Duration = .seconds(30)

    private(set) var next: Duration = first
    private var connectedAt: ContinuousClock.Instant?
    /// Connections in a row that ended before they lived `stable`.
    private(set) var shortLived = 0

    /// The broker accepted a connection (CONNACK 0) at `now`.
    mutating func connected(at now: ContinuousClock.Instant) { connectedAt = now }

    /// True once the current connection has lived `stable` by `now`: the waits start again from `first`.
    mutating func holds(at now: ContinuousClock.Instant) -> Bool {
        guard let since = connectedAt, now - since >= Self.stable else { return false }
        next = Self.first
        shortLived = 0
        return true
    }

    /// An attempt failed or a connection ended at `now`: the wait before the next attempt.
    mutating func ended(at now: ContinuousClock.Instant, refused: Bool) -> Duration {
        if let since = connectedAt {
            connectedAt = nil
            if now - since >= Self.stable {
                next = Self.first
                shortLived = 0
            } else {
                shortLived += 1
            }
        }
        let wait = refused ? max(next, Self.afterRefusal) : next
        next = min(next * 2, Self.longest)
        return wait
    }

    /// Two short-lived connections in a row: the broker drops what it accepts.
    var flapping: Bool { shortLived >= 2 }
}

/// The gateway subscribes to nothing, so under MQTT 3.1.1 a broker sends it only CONNACK, PUBACK and
/// PINGRESP, each at most 4 bytes. libmosquitto allocates whatever length an incoming packet announces
/// before reading it (and copies a PUBLISH once more): an unsolicited 60 MB PUBLISH costs 120 MB. The
/// client peeks at the bytes waiting on a plain TCP socket before libmosquitto reads them and closes the
/// connection when they hold anything else.
enum InboundGuard {
    /// The largest remaining length accepted (CONNACK and PUBACK have 2; MQTT 5 adds properties).
    static let largestRemainingLength = 256

    /// Why `bytes` (the unread start of the stream) must not be read, or nil. Assumes `bytes` starts at a
    /// packet boundary: libmosquitto reads each whole packet it can, and the broker's tiny packets come in
    /// one segment. A packet split across segments can be refused wrongly; that costs one reconnection.
    static func problem(_ bytes: [UInt8]) -> String? {
        var i = 0
        while i < bytes.count {
            let type = bytes[i] >> 4
            var length = 0
            var multiplier = 1
            var j = i + 1
            var complete = false
            while j < bytes.count, j - i <= 4 {
                length += Int(bytes[j] & 0x7F) * multiplier
                multiplier *= 128
                j += 1
                if bytes[j - 1] & 0x80 == 0 {
                    complete = true
                    break
                }
            }
            switch type {
            case 2, 4, 13, 14: break  // CONNACK, PUBACK, PINGRESP, DISCONNECT
            case 3: return "the broker sent an unsolicited PUBLISH (\(complete ? "\(length) bytes" : "a large size") announced)"
            default: return "the broker sent an unexpected packet (type \(type))"
            }
            if length > largestRemainingLength {
                return "the broker announced a packet of \(complete ? String(length) : "more than \(length)") bytes"
            }
            guard complete else { return nil }
            i = j + length
        }
        return nil
    }
}

/// Names the cause of a failed TLS handshake from what libmosquitto logs (and the X.509 verification
/// result it still holds while it logs): libmosquitto itself says only "A TLS error occurred.".
enum TLSFailure {
    /// OpenSSL's X509_V_ERR_* codes that have a plain name here.
    static func cause(logLine: String, verifyResult: Int) -> String? {
        if logLine.contains("host name verification failed") {
            return "the broker's certificate is not for this host name"
        }
        guard logLine.contains("OpenSSL Error") else { return nil }
        if logLine.contains("certificate verify failed") {
            switch verifyResult {
            case 10: return "the broker's certificate has expired"
            case 9: return "the broker's certificate is not valid yet (check the gateway's clock)"
            case 2, 18, 19, 20, 21: return "the broker's certificate is not signed by a trusted certificate authority (unknown CA; see ca_file)"
            case 62: return "the broker's certificate is not for this host name"
            case let code where code > 0: return "the broker's certificate was not accepted (X.509 error \(code))"
            default: return "the broker's certificate was not accepted"
            }
        }
        for notTLS in ["wrong version number", "packet length too long", "unexpected eof", "record layer failure", "http request"]
        where logLine.contains(notTLS) {
            return "the broker did not answer with TLS (is this its TLS port?)"
        }
        return nil
    }
}

/// Signals waiters without polling: each `signal()` resumes those waiting now.
final class Signal: Sendable {
    private let waiters = Mutex<[Int: CheckedContinuation<Bool, Never>]>([:])
    private let next = Atomic<Int>(0)

    func signal() {
        let all = waiters.withLock { w -> [CheckedContinuation<Bool, Never>] in
            let list = Array(w.values)
            w.removeAll()
            return list
        }
        for c in all { c.resume(returning: true) }
    }

    func wait(timeoutMs: Int) async -> Bool {
        let id = next.add(1, ordering: .relaxed).newValue
        let timer = Task {
            try? await Task.sleep(for: .milliseconds(max(1, timeoutMs)))
            if let c = self.waiters.withLock({ $0.removeValue(forKey: id) }) { c.resume(returning: false) }
        }
        let woken = await withCheckedContinuation { c in waiters.withLock { $0[id] = c } }
        timer.cancel()
        return woken
    }
}

/// One `publish` call's wait, told apart by identity, so a late timeout never ends a later wait for the
/// same message id (ids come back after 65535 publishes).
final class Waiter: Sendable {
    let expired = Atomic<Bool>(false)
}


/// A pipe the connection thread polls beside the broker's socket, so a publisher on another thread wakes
/// it at once (libmosquitto's own wake-up pipe is private to `mosquitto_loop`).
final class WakePipe: Sendable {
    let readEnd: Int32
    private let writeEnd: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds {
                _ = fcntl(fd, F_SETFL, O_NONBLOCK)
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            }
        } else {
            fds = [-1, -1]
        }
        readEnd = fds[0]
        writeEnd = fds[1]
    }

    deinit {
        if readEnd >= 0 { close(readEnd) }
        if writeEnd >= 0 { close(writeEnd) }
    }

    func signal() {
        guard writeEnd >= 0 else { return }
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)  // a full pipe already wakes the poll
    }

    func drain() {
        guard readEnd >= 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 64)
        while buffer.withUnsafeMutableBytes({ read(readEnd, $0.baseAddress, $0.count) }) > 0 {}
    }
}
