#if canImport(Glibc)
import Glibc
#endif
import Foundation
import GatewayCore
import Support

/// A private `dbus-daemon` with a system-bus style configuration in a temporary directory: anyone may own
/// any name and send anything, and `max_replies_per_connection` is raised for bursts of calls. It is
/// stopped by its pid in ``close()`` (or ``kill()`` to simulate losing the bus).
///
/// The configuration is `private-bus.conf` beside this file, which the system tests and the benchmarks
/// read too.
public final class PrivateBus: Sendable {
    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    /// The bus address, `unix:path=…`, for `DBUS_SYSTEM_BUS_ADDRESS` or a direct connect.
    public let address: String
    /// The daemon's process id.
    public let pid: pid_t
    public let directory: String

    private init(address: String, pid: pid_t, directory: String) {
        self.address = address
        self.pid = pid
        self.directory = directory
    }

    /// Starts a daemon and waits (up to 10 s) until its socket accepts connections.
    public static func start() async throws -> PrivateBus {
        var template = Array("/tmp/gg-bus-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw StartError(description: "mkdtemp failed") }
        let directory = String(cString: made)
        let socket = directory + "/bus.sock"
        let config = try configuration(socket: socket)
        let configPath = directory + "/bus.conf"
        guard FileManager.default.createFile(atPath: configPath, contents: Data(config.utf8)) else {
            throw StartError(description: "cannot write \(configPath)")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, directory + "/bus.log", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let arguments = ["dbus-daemon", "--nofork", "--nopidfile", "--config-file=" + configPath]
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for arg in argv { free(arg) } }
        // Threads of the test process block signals; without a clean mask the daemon would ignore SIGTERM.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        posix_spawnattr_setsigmask(&attributes, &emptyMask)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGTERM)
        sigaddset(&defaults, SIGINT)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        let status = posix_spawnp(&pid, "dbus-daemon", &actions, &attributes, &argv, environ)
        guard status == 0 else { throw StartError(description: "cannot start dbus-daemon: \(String(cString: strerror(status)))") }
        let bus = PrivateBus(address: "unix:path=" + socket, pid: pid, directory: directory)
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if Self.accepts(socket) { return bus }
            var exitStatus: Int32 = 0
            if waitpid(pid, &exitStatus, WNOHANG) == pid {
                throw StartError(description: "dbus-daemon exited with status \(exitStatus)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        bus.close()
        throw StartError(description: "dbus-daemon did not create its socket in time")
    }

    /// `private-bus.conf` of this source tree with `socket` filled in.
    static func configuration(socket: String, source: String = #filePath) throws -> String {
        let path = String(source.prefix(upTo: source.lastIndex(of: "/") ?? source.startIndex)) + "/private-bus.conf"
        guard let template = FileContents.read(path) else {
            throw StartError(description: "cannot read the bus configuration \(path)")
        }
        return String(decoding: template, as: UTF8.self).replacing("{socket}", with: socket)
    }

    /// Whether a Unix socket at `path` accepts a connection (the file appears before `listen`).
    private static func accepts(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (i, b) in bytes.enumerated() { buffer[i] = b }
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return result == 0
    }

    /// Stops the daemon (SIGTERM, then SIGKILL after 2 s) and removes its directory. Idempotent.
    public func close() {
        stop(signal: SIGTERM)
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Kills the daemon at once, as if the bus crashed. The directory stays until ``close()``.
    public func kill() {
        stop(signal: SIGKILL)
    }

    private func stop(signal: Int32) {
        guard Glibc.kill(pid, 0) == 0 else { return }
        _ = Glibc.kill(pid, signal)
        var exitStatus: Int32 = 0
        for _ in 0..<200 {
            let r = waitpid(pid, &exitStatus, WNOHANG)
            if r == pid || r < 0 { return }
            usleep(10_000)
        }
        _ = Glibc.kill(pid, SIGKILL)
        _ = waitpid(pid, &exitStatus, 0)
    }

    deinit { close() }
}
