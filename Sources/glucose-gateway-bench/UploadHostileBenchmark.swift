#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import SQLiteStore
import Support
import SyncEngine

/// `upload-hostile`: the resident memory of `glucose-gateway run` against a server that answers every
/// upload with a huge body.
///
/// A private dbus-daemon (the daemon needs a bus; no bluetoothd is there, so it only uploads), the
/// loopback Nightscout double, a database seeded with readings, and the daemon. The server first answers
/// 503 for a while (the daemon loads libcurl, retries and backs off: the baseline), then answers `--answers`
/// uploads with 200 and a body of `--size` bytes, then behaves. Reports VmRSS at the baseline, the peak
/// (VmHWM) and VmRSS after the readings are acknowledged. Only the processes it started are stopped.
enum UploadHostileBenchmark {
    static func run(_ args: [String]) async -> Int32 {
        guard let o = BenchArguments(args, names: ["size", "answers", "gateway", "server"],
                                     usage: "upload-hostile [--size BYTES] [--answers N] [--gateway PATH] [--server PATH]") else { return 64 }
        let size = o.int("size", 100_000_000)
        let answers = o.int("answers", 5)
        let gateway = o.string("gateway", DownloadBenchmark.siblingExecutable("glucose-gateway"))
        let script = o.string("server", "SystemTests/fake_nightscout.py")
        guard size > 0, (1...100).contains(answers), access(gateway, X_OK) == 0 else {
            print("upload-hostile: need --size > 0, 1...100 answers and an executable gateway (\(gateway))")
            return 64
        }
        guard let dir = DownloadBenchmark.makeScratchDirectory("hostile") else {
            print("upload-hostile: cannot create a temporary directory")
            return 1
        }
        var started: [pid_t] = []
        let server: Server
        do {
            server = try Server(script: script)
        } catch {
            print("upload-hostile: \(error)")
            return 1
        }
        defer {
            for pid in started.reversed() { DownloadBenchmark.stop(pid) }
            server.stop()
            _ = DownloadBenchmark.spawn(["/bin/rm", "-rf", dir], environment: [:]).map(DownloadBenchmark.waitStatus)
        }
        func fail(_ message: String) -> Int32 {
            print("upload-hostile: " + message)
            return 1
        }
        let bus: String
        do {
            bus = try DownloadBenchmark.startPrivateBus(in: dir, started: &started)
        } catch {
            return fail(error.description)
        }

        let database = dir + "/gateway.sqlite3"
        let readings = 50
        do {
            let store = try SQLiteStore(path: database, builders: [NightscoutBodyBuilder()])
            try await UploadBenchmark.seed(store, count: readings)
            await store.close()
            try await server.control(#"{"mode":"status","status":503}"#)
        } catch {
            return fail("\(error)")
        }
        let config = dir + "/gateway.toml"
        let text = "[gateway]\ndatabase = \"\(database)\"\n[nightscout]\nurl = \"\(server.url)\"\napi_secret = \"\(Server.secret)\"\n"
            + "[network]\nretry_count = 1\nnetwork_timeout_ms = 5000\n"
        guard DownloadBenchmark.write(file: config, text), chmod(config, 0o600) == 0 else { return fail("cannot write the config") }
        guard let daemon = DownloadBenchmark.spawn([gateway, "--config", config, "run", "--time-scale", "1000"],
                                                   environment: ["DBUS_SYSTEM_BUS_ADDRESS": bus, "TZ": "UTC"])
        else { return fail("cannot start the daemon") }
        started.append(daemon.pid)

        // Baseline: the daemon has loaded libcurl and is retrying and backing off against 503s.
        guard DaemonSoak.waitFor(seconds: 30, { serverStat(server, "uploads") >= 4 }) else {
            return fail("the daemon did not try to upload")
        }
        usleep(1_000_000)
        let baseline = DaemonSoak.rssKilobytes(daemon.pid)
        do {
            try await server.control(#"{"mode":"huge","size":\#(size),"times":\#(answers)}"#)
        } catch {
            return fail("\(error)")
        }
        let hostileStart = DownloadBenchmark.monotonicSeconds()
        guard DaemonSoak.waitFor(seconds: 120, { serverStat(server, "count") >= readings }) else {
            return fail("the readings were not uploaded after the huge answers")
        }
        let hostileSeconds = DownloadBenchmark.monotonicSeconds() - hostileStart
        usleep(2_000_000)
        let after = DaemonSoak.rssKilobytes(daemon.pid)
        let peak = DownloadBenchmark.highWaterMark(daemon.pid) ?? -1
        print("upload-hostile: \(serverStat(server, "faults.huge")) answers of \(size) bytes, then \(readings) readings acknowledged in \(DownloadBenchmark.fmt(hostileSeconds)) s")
        print("  daemon VmRSS baseline \(baseline) KiB; peak VmHWM \(peak) KiB; after \(after) KiB; after - baseline \(after - baseline) KiB (goal <= 2048)")
        return 0
    }

    /// A counter from `/__stats` of the double, through the curl program (the benchmark waits
    /// synchronously between samples).
    static func serverStat(_ server: Server, _ key: String) -> Int {
        guard let p = DownloadBenchmark.spawn(["curl", "-s", "http://127.0.0.1:\(server.controlPort)/__stats"], environment: [:], captureOutput: true),
              let fd = p.output else { return -1 }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        close(fd)
        _ = DownloadBenchmark.waitStatus(p)
        guard let json = try? JSONParser.parse(bytes) else { return -1 }
        let value = key.hasPrefix("faults.") ? json["faults"]?[String(key.dropFirst(7))] : json[key]
        return value?.int64Value.map { Int($0) } ?? -1
    }
}
