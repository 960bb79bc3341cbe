#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import Support

/// The service manager notification protocol (`sd_notify`), without libsystemd.
///
/// systemd passes `NOTIFY_SOCKET` to a `Type=notify` service: a path to a unix datagram socket, or an
/// abstract socket name written with a leading `@`. Each notification is one datagram of newline-separated
/// `KEY=value` assignments. Without `NOTIFY_SOCKET` (run from a shell) every call does nothing.
///
/// With `WatchdogSec=` systemd also passes `WATCHDOG_USEC` (and `WATCHDOG_PID`, the process it is meant
/// for); the service must send `WATCHDOG=1` more often than that. `runWatchdog()` sends it at half the
/// interval, as sd_watchdog_enabled(3) advises.
public struct SystemdNotifier: Sendable {
    /// The socket address as given (`/run/systemd/notify` or `@name`); nil: notifications are off.
    public let socketPath: String?
    /// Half of `WATCHDOG_USEC` when the watchdog is meant for this process; nil when off.
    public let watchdogInterval: Duration?

    public init(environment: [String: String], processID: Int32 = getpid()) {
        if let path = environment["NOTIFY_SOCKET"], !path.isEmpty, path.hasPrefix("/") || path.hasPrefix("@") {
            socketPath = path
        } else {
            socketPath = nil
        }
        watchdogInterval = Self.watchdogInterval(environment: environment, processID: processID)
    }

    public var isEnabled: Bool { socketPath != nil }

    static func watchdogInterval(environment: [String: String], processID: Int32) -> Duration? {
        guard let text = environment["WATCHDOG_USEC"], let usec = UInt64(text), usec > 0 else { return nil }
        if let pidText = environment["WATCHDOG_PID"] {
            guard let pid = Int32(pidText), pid == processID else { return nil }
        }
        return .microseconds(Int64(clamping: usec / 2))
    }

    /// `READY=1`, with a first status line.
    @discardableResult
    public func ready(status: String? = nil) -> Bool {
        send(["READY=1"] + (status.map { ["STATUS=" + Self.oneLine($0)] } ?? []))
    }

    /// `STATUS=...`: the one line `systemctl status` shows.
    @discardableResult
    public func status(_ text: String) -> Bool { send(["STATUS=" + Self.oneLine(text)]) }

    /// `WATCHDOG=1`: alive.
    @discardableResult
    public func watchdog() -> Bool { send(["WATCHDOG=1"]) }

    /// `STOPPING=1`: shutting down on request.
    @discardableResult
    public func stopping(status: String? = nil) -> Bool {
        send(["STOPPING=1"] + (status.map { ["STATUS=" + Self.oneLine($0)] } ?? []))
    }

    /// Sends `WATCHDOG=1` every `watchdogInterval` until the task is cancelled; returns at once when the
    /// watchdog is off. `alive` lets the caller withhold the ping when its main loop is stuck.
    /// `clock` paces the pings; systemd's watchdog runs on real time, so only tests pass another.
    public func runWatchdog(alive: @Sendable () -> Bool = { true }, clock: any SessionClock = ContinuousClock()) async {
        guard let interval = watchdogInterval, isEnabled else { return }
        while !Task.isCancelled {
            if alive() { watchdog() }
            do { try await clock.sleep(for: interval) } catch { return }
        }
    }

    /// Sends one datagram; false when notifications are off or the send failed.
    @discardableResult
    public func send(_ assignments: [String]) -> Bool {
        guard let socketPath else { return false }
        return Self.sendDatagram(assignments.joined(separator: "\n"), to: socketPath)
    }

    static func oneLine(_ text: String) -> String {
        String(text.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
    }

    static func sendDatagram(_ message: String, to path: String) -> Bool {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var pathBytes = Array(path.utf8)
        let abstract = pathBytes.first == UInt8(ascii: "@")
        if abstract { pathBytes[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        // A filesystem path needs room for its terminating NUL; an abstract name does not have one.
        guard !pathBytes.isEmpty, pathBytes.count + (abstract ? 0 : 1) <= capacity else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in pathBytes.enumerated() { raw[i] = b }
        }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path) ?? 2) + socklen_t(pathBytes.count + (abstract ? 0 : 1))

        #if canImport(Glibc)
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #else
        let fd = socket(AF_UNIX, SOCK_DGRAM, 0)
        #endif
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let bytes = Array(message.utf8)
        let sent = bytes.withUnsafeBytes { buffer in
            withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    sendto(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL), sa, length)
                }
            }
        }
        return sent == bytes.count
    }
}
