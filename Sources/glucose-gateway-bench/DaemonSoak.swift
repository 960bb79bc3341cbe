#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import Support

/// `daemon-soak`: `glucose-gateway run` through one simulated hour against the BlueZ stand-in.
///
/// A private dbus-daemon, the stand-in with one meter that measures every 5 simulated minutes and
/// advertises only after each measurement, `pair`, then `run`. Reports the daemon's resident memory after
/// its first download and after the hour, the CPU seconds it uses over 60 idle seconds (no meter
/// advertising), and the time from a meter starting to advertise with a new measurement to that reading
/// being in the database (and the daemon's own share: advertisement seen to `Connect` sent). Only the
/// processes it started are stopped, by pid.
enum DaemonSoak {
    static let address = "C0:26:DA:50:AC:01"

    static func run(_ args: [String]) async -> Int32 {
        guard let o = BenchArguments(args, names: ["time-scale", "idle", "probes", "scan-mode", "gateway"],
                                     usage: "daemon-soak [--time-scale X] [--idle SECONDS] [--probes N] [--scan-mode discovery|profile] [--gateway PATH]")
        else { return 64 }
        let scale = o.double("time-scale", 60)
        let idleSeconds = o.double("idle", 60)
        let probes = o.int("probes", 5)
        let mode = o.string("scan-mode", "discovery")
        let gateway = o.string("gateway", DownloadBenchmark.siblingExecutable("glucose-gateway"))
        guard scale >= 1, idleSeconds > 0, (1...50).contains(probes), mode == "discovery" || mode == "profile", access(gateway, X_OK) == 0 else {
            print("daemon-soak: need --time-scale >= 1, --idle > 0, 1...50 probes and an executable gateway (\(gateway))")
            return 64
        }

        guard let dir = DownloadBenchmark.makeScratchDirectory("soak") else {
            print("daemon-soak: cannot create a temporary directory")
            return 1
        }
        var started: [pid_t] = []
        defer {
            for pid in started.reversed() { DownloadBenchmark.stop(pid) }
            _ = DownloadBenchmark.spawn(["/bin/rm", "-rf", dir], environment: [:]).map(DownloadBenchmark.waitStatus)
        }
        func fail(_ message: String) -> Int32 {
            print("daemon-soak: " + message)
            return 1
        }

        let bus: String
        do {
            bus = try DownloadBenchmark.startPrivateBus(in: dir, started: &started)
        } catch {
            return fail(error.description)
        }
        let env = ["DBUS_SYSTEM_BUS_ADDRESS": bus, "TZ": "UTC"]

        let meter = """
        {"address": "\(address)", "name": "meter+soak", "pin": "123456", "bonding": true,
         "generate": {"count": 5, "firstSequence": 1, "start": "2024-03-05T06:00:00", "intervalMinutes": 60},
         "newRecords": {"everySeconds": 300, "limit": 12}, "advertising": "off"}
        """
        guard DownloadBenchmark.write(file: dir + "/meter.json", meter),
              let sim = DownloadBenchmark.spawn([DownloadBenchmark.simulator(besideGateway: gateway), "--standin", "--time-scale", String(scale), "--meter", dir + "/meter.json"],
                                                environment: env, captureOutput: true)
        else { return fail("cannot start the simulator") }
        started.append(sim.pid)
        guard let out = sim.output, DownloadBenchmark.readLine(fd: out, prefix: "ready", seconds: 20) else {
            return fail("the simulator did not become ready")
        }

        let database = dir + "/gateway.sqlite3"
        let config = dir + "/gateway.toml"
        guard DownloadBenchmark.write(file: config, "[gateway]\ndatabase = \"\(database)\"\nscan_mode = \"\(mode)\"\n") else { return fail("cannot write the config") }
        func control(_ method: String, _ arguments: [String]) -> Bool {
            guard let p = DownloadBenchmark.spawn(["dbus-send", "--bus=" + bus, "--print-reply", "--dest=org.bluez", "/org/glucosegateway/simulator",
                                                   "org.glucosegateway.Simulator1." + method] + arguments, environment: [:]) else { return false }
            return DownloadBenchmark.waitStatus(p).status == 0
        }
        guard control("Advertise", ["string:" + address, "double:600"]),
              let pair = DownloadBenchmark.spawn([gateway, "--config", config, "pair", address, "--pin", "123456", "--timezone", "UTC", "--wait", "30"],
                                                 environment: env),
              DownloadBenchmark.waitStatus(pair).status == 0
        else { return fail("pairing failed") }

        guard let daemon = DownloadBenchmark.spawn([gateway, "--config", config, "run", "--quiet-after", "1"], environment: env) else {
            return fail("cannot start the daemon")
        }
        started.append(daemon.pid)
        let statePath = database + ".daemon.json"
        guard waitFor(seconds: 20, { readFile(statePath)?.contains("\"phase\":\"running\"") == true }) else {
            return fail("the daemon did not start")
        }
        guard waitFor(seconds: 30, { readingCount(database) >= 5 }) else { return fail("the first download did not arrive") }
        usleep(500_000)
        let rssStart = rssKilobytes(daemon.pid)
        let hourStart = DownloadBenchmark.monotonicSeconds()

        // The simulated hour: 12 measurements, each followed by 30 simulated seconds of advertising.
        let hour = 3600 / scale
        guard waitFor(seconds: hour + 30, { readingCount(database) >= 17 }) else {
            return fail("the hour's 12 measurements did not all arrive (\(readingCount(database)) readings)")
        }
        let remaining = hour - (DownloadBenchmark.monotonicSeconds() - hourStart)
        if remaining > 0 { usleep(UInt32(remaining * 1_000_000)) }
        usleep(UInt32(max(1.5, 40 / scale) * 1_000_000))
        let rssEnd = rssKilobytes(daemon.pid)

        // Idle: the meter is silent (its measurements are done), nothing to upload.
        let cpuBefore = cpuSeconds(daemon.pid)
        usleep(UInt32(idleSeconds * 1_000_000))
        let cpuIdle = cpuSeconds(daemon.pid) - cpuBefore

        // Appearance to first record stored: a new measurement makes the meter advertise.
        var latencies: [Double] = []
        var reactions: [Int] = []
        for n in 0..<probes {
            let before = readingCount(database)
            let record = "{\"time\": \"2024-03-06T0\(n):30:00\", \"mgdl\": \(110 + n)}"
            let t0 = DownloadBenchmark.monotonicSeconds()
            guard control("AddRecord", ["string:" + address, "string:" + record]) else { return fail("AddRecord failed") }
            guard waitFor(seconds: 20, interval: 1_000, { readingCount(database) > before }) else { return fail("probe \(n) never arrived") }
            latencies.append(DownloadBenchmark.monotonicSeconds() - t0)
            if let state = readFile(statePath), let r = number(after: "\"last_reaction_ms\":", in: state) { reactions.append(r) }
            usleep(UInt32((1.5 + 40 / scale) * 1_000_000))
        }
        let connects = readFile(statePath).flatMap { number(after: "\"connects\":", in: $0) } ?? -1
        let stopAt = DownloadBenchmark.monotonicSeconds()
        kill(daemon.pid, SIGTERM)
        let finished = DownloadBenchmark.waitStatus(daemon)
        let stopSeconds = DownloadBenchmark.monotonicSeconds() - stopAt
        started.removeAll { $0 == daemon.pid }

        func ms(_ s: Double) -> String { DownloadBenchmark.fmt(s * 1000) }
        let sorted = latencies.sorted()
        print("daemon-soak: scan mode \(mode), one simulated hour at \(DownloadBenchmark.fmt(scale))x (\(DownloadBenchmark.fmt(hour)) s), 17 + \(probes) readings")
        print("  RSS after the first download: \(rssStart) KiB; after the hour: \(rssEnd) KiB; growth \(rssEnd - rssStart) KiB (goal < 1024)")
        print("  CPU while idle over \(DownloadBenchmark.fmt(idleSeconds)) s: \(DownloadBenchmark.fmt(cpuIdle)) s (goal < 0.05)")
        print("  meter advertising -> reading stored: median \(ms(sorted[sorted.count / 2])) ms, min \(ms(sorted[0])) ms, max \(ms(sorted[sorted.count - 1])) ms")
        print("  meter connections: \(connects) for \(12 + probes) measurements (and the first download)")
        if !reactions.isEmpty {
            print("  daemon reaction (advertisement seen -> Connect sent): max \(reactions.max() ?? 0) ms (goal < 100)")
        }
        print("  SIGTERM -> exit \(finished.status) in \(DownloadBenchmark.fmt(stopSeconds)) s; peak RSS \(finished.maxRSSKilobytes) KiB; total CPU \(DownloadBenchmark.fmt(finished.cpuSeconds)) s")
        return 0
    }

    static func waitFor(seconds: Double, interval: UInt32 = 20_000, _ condition: () -> Bool) -> Bool {
        let deadline = DownloadBenchmark.monotonicSeconds() + seconds
        while DownloadBenchmark.monotonicSeconds() < deadline {
            if condition() { return true }
            usleep(interval)
        }
        return condition()
    }

    static func readFile(_ path: String) -> String? {
        FileContents.read(path).map { String(decoding: $0, as: UTF8.self) }
    }

    static func number(after key: String, in text: String) -> Int? {
        guard let range = text.range(of: key) else { return nil }
        return Int(text[range.upperBound...].prefix { $0.isNumber })
    }

    /// Readings in the database, read through the sqlite3 shell as any outside reader would.
    static func readingCount(_ database: String) -> Int {
        guard let p = DownloadBenchmark.spawn(["sqlite3", "-readonly", database, "SELECT count(*) FROM reading"], environment: [:], captureOutput: true),
              let fd = p.output else { return -1 }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        close(fd)
        _ = DownloadBenchmark.waitStatus(p)
        return Int(String(decoding: bytes.filter { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self)) ?? -1
    }

    static func rssKilobytes(_ pid: pid_t) -> Int {
        guard let status = readFile("/proc/\(pid)/status"), let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return -1 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
    }

    /// User plus system CPU seconds of a process, from /proc/PID/stat.
    static func cpuSeconds(_ pid: pid_t) -> Double {
        guard let stat = readFile("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return -1 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command name: state is field 3, utime 14 and stime 15 (1-based over the whole line).
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return -1 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
