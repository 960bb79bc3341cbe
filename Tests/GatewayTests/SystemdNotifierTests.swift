#if canImport(Glibc)
import Glibc
#endif
import Testing
import TestSupport

@testable import Gateway

/// The notifier against real unix datagram sockets, as systemd listens on them.
@Suite struct SystemdNotifierTests {
    /// A bound datagram socket standing in for systemd's notify socket.
    final class Listener {
        let fd: Int32
        let address: String
        let filePath: String?

        init(abstract: Bool) throws {
            let unique = "gw-notify-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            address = abstract ? "@" + unique : "/tmp/" + unique + ".sock"
            filePath = abstract ? nil : address
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw Failure(message: "socket failed") }
            var sa = sockaddr_un()
            sa.sun_family = sa_family_t(AF_UNIX)
            var bytes = Array(address.utf8)
            if abstract { bytes[0] = 0 }
            withUnsafeMutableBytes(of: &sa.sun_path) { raw in
                for (i, b) in bytes.enumerated() { raw[i] = b }
            }
            let length = socklen_t(2 + bytes.count + (abstract ? 0 : 1))
            let bound = withUnsafePointer(to: &sa) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
            }
            guard bound == 0 else {
                close(fd)
                throw Failure(message: "bind \(address) failed: errno \(errno)")
            }
            // Every receive gives up after 2 s, so no test can hang.
            var timeout = timeval(tv_sec: 2, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }

        /// The next datagram, or nil after the receive timeout.
        func receive() -> String? {
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n >= 0 else { return nil }
            return String(decoding: buffer[0..<n], as: UTF8.self)
        }

        /// A datagram already waiting, without blocking; nil when there is none.
        func pending() -> String? {
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            guard n >= 0 else { return nil }
            return String(decoding: buffer[0..<n], as: UTF8.self)
        }

        /// The next datagram without blocking a thread of the shared pool, waiting at most `seconds`.
        /// Generous: when the whole suite starts, hundreds of tests queue on the same two-thread pool
        /// ahead of the watchdog task, which can then wait tens of seconds to run.
        func receiveAsync(within seconds: Double = 120) async -> String? {
            var received: String?
            _ = await waitUntil(seconds) {
                received = pending()
                return received != nil
            }
            return received
        }

        func closeAndRemove() {
            close(fd)
            if let filePath { unlink(filePath) }
        }
    }

    struct Failure: Error { var message: String }

    @Test(arguments: [false, true])
    func sendsStateToTheSocket(abstract: Bool) throws {
        let listener = try Listener(abstract: abstract)
        defer { listener.closeAndRemove() }
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": listener.address])
        #expect(notifier.isEnabled)

        #expect(notifier.ready(status: "pending 3, last error 1001"))
        #expect(listener.receive() == "READY=1\nSTATUS=pending 3, last error 1001")
        #expect(notifier.status("line one\nline two"))
        #expect(listener.receive() == "STATUS=line one line two")
        #expect(notifier.watchdog())
        #expect(listener.receive() == "WATCHDOG=1")
        #expect(notifier.stopping())
        #expect(listener.receive() == "STOPPING=1")
    }

    @Test func withoutNotifySocketNothingIsSent() {
        let notifier = SystemdNotifier(environment: [:])
        #expect(!notifier.isEnabled)
        #expect(!notifier.ready())
        #expect(!notifier.watchdog())
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "relative/path"]).isEnabled == false)
    }

    @Test func sendToAMissingSocketFailsQuietly() {
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": "/nonexistent-dir/notify.sock"])
        #expect(notifier.isEnabled)
        #expect(!notifier.ready())
        let long = SystemdNotifier(environment: ["NOTIFY_SOCKET": "/" + String(repeating: "x", count: 200)])
        #expect(!long.ready())
    }

    @Test func watchdogIntervalIsHalfOfWatchdogUsecForThisProcess() {
        let env = ["WATCHDOG_USEC": "30000000"]
        #expect(SystemdNotifier(environment: env).watchdogInterval == .seconds(15))
        #expect(SystemdNotifier(environment: env.merging(["WATCHDOG_PID": "\(getpid())"]) { $1 }).watchdogInterval == .seconds(15))
        #expect(SystemdNotifier(environment: env.merging(["WATCHDOG_PID": "1"]) { $1 }, processID: 42).watchdogInterval == nil)
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "0"]).watchdogInterval == nil)
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "soon"]).watchdogInterval == nil)
        #expect(SystemdNotifier(environment: [:]).watchdogInterval == nil)
    }

    @Test(.timeLimit(.minutes(7)))
    func watchdogLoopPingsUntilCancelled() async throws {
        let listener = try Listener(abstract: false)
        defer { listener.closeAndRemove() }
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": "100000"])
        #expect(notifier.watchdogInterval == .milliseconds(50))
        let clock = ManualClock()
        let task = Task { await notifier.runWatchdog(clock: clock) }
        #expect(await listener.receiveAsync() == "WATCHDOG=1")
        for _ in 0..<2 {
            // The loop waits one interval between pings: asleep until then, and nothing sent meanwhile.
            let next = clock.now + .milliseconds(50)
            try #require(await waitUntil(120) { clock.deadlines == [next] })
            #expect(listener.pending() == nil)
            clock.advance(by: .milliseconds(49))
            #expect(clock.deadlines == [next])
            #expect(listener.pending() == nil)
            clock.advance(by: .milliseconds(1))
            #expect(await listener.receiveAsync() == "WATCHDOG=1")
        }
        task.cancel()
        await task.value
    }

    @Test func watchdogLoopWithoutIntervalReturnsAtOnce() async {
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": "/nonexistent-dir/notify.sock"])
        await notifier.runWatchdog()
        #expect(notifier.watchdogInterval == nil)
    }
}
