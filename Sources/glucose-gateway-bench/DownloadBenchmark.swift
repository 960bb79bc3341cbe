#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import Support

/// `download`: one meter download through the BlueZ stand-in, measured as the gateway process sees it.
///
/// Starts a private dbus-daemon and `glucose-gateway-simulator --standin` with N records, pairs, then
/// runs `glucose-gateway sync` K times, each on a fresh database, and reports the `sync` process's CPU
/// seconds (user + system) and peak resident memory from `wait4`. Only processes it started are stopped,
/// by pid.
enum DownloadBenchmark {
    static let address = "C0:26:DA:0B:E4:01"

    static func run(_ args: [String]) async -> Int32 {
        guard let o = BenchArguments(args, names: ["records", "runs", "gateway"],
                                     usage: "download [--records N] [--runs K] [--gateway PATH]") else { return 64 }
        let records = o.int("records", 1000)
        let runs = o.int("runs", 5)
        let gateway = o.string("gateway", siblingExecutable("glucose-gateway"))
        guard (1...65_000).contains(records), (1...100).contains(runs), access(gateway, X_OK) == 0 else {
            print("download: need 1...65000 records, 1...100 runs and an executable gateway (\(gateway))")
            return 64
        }

        guard let dir = makeScratchDirectory("bench") else {
            print("download: cannot create a temporary directory")
            return 1
        }
        var started: [pid_t] = []
        defer {
            for pid in started.reversed() { stop(pid) }
            _ = spawn(["/bin/rm", "-rf", dir], environment: [:]).map(waitStatus)
        }

        let busAddress: String
        do {
            busAddress = try startPrivateBus(in: dir, started: &started)
        } catch {
            print("download: \(error)")
            return 1
        }
        let env = ["DBUS_SYSTEM_BUS_ADDRESS": busAddress, "TZ": "UTC"]
        guard let sim = spawn([simulator(besideGateway: gateway), "--standin", "--address", address, "--name", "meter+bench",
                               "--pin", "123456", "--records", String(records), "--with-context"],
                              environment: env, captureOutput: true) else {
            print("download: cannot start the simulator")
            return 1
        }
        started.append(sim.pid)
        guard let out = sim.output, readLine(fd: out, prefix: "ready", seconds: 20) else {
            print("download: the simulator did not become ready")
            return 1
        }

        var cpu: [Double] = []
        var rss: [Int] = []
        var wall: [Double] = []
        for run in 0..<runs {
            let config = dir + "/gw\(run).toml"
            guard write(file: config, "[gateway]\ndatabase = \"\(dir)/gw\(run).sqlite3\"\n") else { return 1 }
            guard let pair = spawn([gateway, "--config", config, "pair", address, "--pin", "123456"], environment: env),
                  waitStatus(pair).status == 0 else {
                print("download: pairing failed")
                return 1
            }
            let t0 = monotonicSeconds()
            guard let sync = spawn([gateway, "--config", config, "sync"], environment: env) else { return 1 }
            let result = waitStatusSampling(sync)
            wall.append(monotonicSeconds() - t0)
            guard result.status == 0 else {
                print("download: sync exited \(result.status)")
                return 1
            }
            cpu.append(result.cpuSeconds)
            rss.append(result.highWaterKilobytes)
        }
        func median(_ v: [Double]) -> Double { v.sorted()[v.count / 2] }
        print("download of \(records) records through the BlueZ stand-in, \(runs) runs (gateway process only):")
        print("  CPU seconds (user+sys): median \(fmt(median(cpu))), min \(fmt(cpu.min() ?? 0)), max \(fmt(cpu.max() ?? 0))")
        print("  peak RSS (VmHWM): median \(fmt(Double(rss.sorted()[rss.count / 2]) / 1024)) MB, max \(fmt(Double(rss.max() ?? 0) / 1024)) MB")
        print("  wall seconds: median \(fmt(median(wall)))")
        return 0
    }

    // MARK: - Processes

    struct Spawned {
        var pid: pid_t
        var output: Int32?
    }

    struct Finished {
        var status: Int32
        var cpuSeconds: Double
        /// `ru_maxrss`. Linux carries the parent's resident size across a vfork or fork and exec into the
        /// child's `ru_maxrss`, so a child of this (larger) process is charged at least this process's size.
        var maxRSSKilobytes: Int
        /// The last `VmHWM` read from /proc while the process ran (`waitStatusSampling`): the child's own
        /// peak, read every 2 ms, so only growth in its last 2 ms can be missed.
        var highWaterKilobytes: Int = 0
    }

    static func spawn(_ argv: [String], environment: [String: String], captureOutput: Bool = false) -> Spawned? {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var pipeFDs: [Int32] = [-1, -1]
        if captureOutput {
            guard pipe(&pipeFDs) == 0 else { return nil }
            posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
            posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
            posix_spawn_file_actions_addclose(&actions, pipeFDs[1])
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)

        var env = currentEnvironment()
        for (k, v) in environment { env[k] = v }
        let envStrings = env.map { "\($0.key)=\($0.value)" }
        var cArgs = argv.map { strdup($0) } + [nil]
        var cEnv = envStrings.map { strdup($0) } + [nil]
        defer {
            for p in cArgs { free(p) }
            for p in cEnv { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, argv[0], &actions, nil, &cArgs, &cEnv)
        if captureOutput { close(pipeFDs[1]) }
        guard rc == 0 else {
            if captureOutput { close(pipeFDs[0]) }
            return nil
        }
        return Spawned(pid: pid, output: captureOutput ? pipeFDs[0] : nil)
    }

    static func waitStatus(_ p: Spawned) -> Finished {
        waitStatus(p, sampleHighWater: false)
    }

    static func waitStatusSampling(_ p: Spawned) -> Finished {
        waitStatus(p, sampleHighWater: true)
    }

    static func waitStatus(_ p: Spawned, sampleHighWater: Bool) -> Finished {
        var status: Int32 = 0
        var usage = rusage()
        var highWater = 0
        while true {
            let r = wait4(p.pid, &status, sampleHighWater ? WNOHANG : 0, &usage)
            if r == p.pid { break }
            if r < 0 && errno != EINTR { break }
            if r == 0 {
                highWater = max(highWater, highWaterMark(p.pid) ?? 0)
                usleep(2000)
            }
        }
        let cpu = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        let exitCode = (status & 0x7F) == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        return Finished(status: exitCode, cpuSeconds: cpu, maxRSSKilobytes: Int(usage.ru_maxrss), highWaterKilobytes: highWater)
    }

    /// `VmHWM` of a running process, in kB.
    static func highWaterMark(_ pid: pid_t) -> Int? {
        let fd = open("/proc/\(pid)/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        for line in String(decoding: buffer[0..<n], as: UTF8.self).split(separator: "\n") where line.hasPrefix("VmHWM:") {
            return Int(line.dropFirst(6).filter { $0.isNumber })
        }
        return nil
    }

    static func stop(_ pid: pid_t) {
        kill(pid, SIGTERM)
        for _ in 0..<100 {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { return }
            usleep(50_000)
        }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }

    // MARK: - Files, lines and clocks

    static func readLine(fd: Int32, prefix: String, seconds: Double) -> Bool {
        let deadline = monotonicSeconds() + seconds
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 512)
        while monotonicSeconds() < deadline {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 200) >= 0 else { return false }
            if pfd.revents == 0 { continue }
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { return false }
            buffer += chunk[0..<n]
            if String(decoding: buffer, as: UTF8.self).split(separator: "\n").contains(where: { $0.hasPrefix(prefix) }) { return true }
        }
        return false
    }

    static func waitForFile(_ path: String, seconds: Double) -> Bool {
        let deadline = monotonicSeconds() + seconds
        while monotonicSeconds() < deadline {
            if access(path, F_OK) == 0 { return true }
            usleep(10_000)
        }
        return false
    }

    static func write(file path: String, _ text: String) -> Bool {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } == bytes.count
    }

    static func monotonicSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    static func fmt(_ v: Double) -> String {
        let scaled = Int((v * 1000).rounded())
        let frac = String(scaled % 1000)
        return "\(scaled / 1000)." + String(repeating: "0", count: 3 - frac.count) + frac
    }

    static func currentEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let eq = text.firstIndex(of: "=") { result[String(text[..<eq])] = String(text[text.index(after: eq)...]) }
            pointer += 1
        }
        return result
    }

    /// The meter simulator: glucose-gateway-simulator beside `gateway`, else beside this program.
    static func simulator(besideGateway gateway: String) -> String {
        let dir = gateway.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        let beside = dir + "/glucose-gateway-simulator"
        return access(beside, X_OK) == 0 ? beside : siblingExecutable("glucose-gateway-simulator")
    }

    static func siblingExecutable(_ name: String) -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return name }
        let path = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let dir = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        return dir + "/" + name
    }

    /// A new directory `/tmp/gg-<tag>-XXXXXX`, nil when none can be made.
    static func makeScratchDirectory(_ tag: String) -> String? {
        var template = Array("/tmp/gg-\(tag)-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ buffer in buffer.baseAddress.flatMap { mkdtemp($0) } }) else {
            return nil
        }
        return String(cString: made)
    }

    /// Starts a private dbus-daemon listening on `<dir>/bus.sock` and waits for its socket. Its pid goes
    /// into `started` as soon as it runs, so the caller stops it whatever happens next. Returns the bus
    /// address.
    static func startPrivateBus(in dir: String, started: inout [pid_t]) throws(BenchError) -> String {
        let socket = dir + "/bus.sock"
        guard write(file: dir + "/bus.conf", busConfig(socket: socket)),
              let bus = spawn(["dbus-daemon", "--nofork", "--nopidfile", "--config-file=" + dir + "/bus.conf"], environment: [:])
        else { throw BenchError("cannot start dbus-daemon") }
        started.append(bus.pid)
        guard waitForFile(socket, seconds: 10) else { throw BenchError("dbus-daemon did not start") }
        return "unix:path=" + socket
    }

    /// The private bus configuration the Swift and system tests use too: `Tests/TestSupport/private-bus.conf`
    /// of the tree this binary was built from, with `socket` filled in; empty (so the bus does not start)
    /// when that file cannot be read.
    static func busConfig(socket: String, source: String = #filePath) -> String {
        let tree = source.split(separator: "/", omittingEmptySubsequences: false).dropLast(3).joined(separator: "/")
        let path = tree + "/Tests/TestSupport/private-bus.conf"
        guard let template = FileContents.read(path) else {
            print("cannot read the bus configuration \(path)")
            return ""
        }
        return String(decoding: template, as: UTF8.self).replacing("{socket}", with: socket)
    }
}
