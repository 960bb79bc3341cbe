import Foundation
import Support
import Synchronization
import GatewayCore
import GlucoseProfile
import SQLiteStore
import SyncEngine
import Transport

/// Upload benchmarks against the loopback Nightscout double (`SystemTests/fake_nightscout.py`, started here;
/// run from the repository root or pass `--server PATH`).
///
///   upload-replay [--count 10000]            backlog replay: seconds, requests, readings per second
///   upload-resume [--mode event|probe] [--runs 5]
///                                            network back -> first batch acknowledged, recovery mode on
///   upload-seed --database PATH [--count N] [--fhir-subject Patient/x]
///                                            fill a database with synthetic readings and their outbox rows
enum UploadBenchmark {
    static func run(_ name: String, _ args: [String]) async -> Int32 {
        var options: [String: String] = [:]
        var i = 0
        while i < args.count {
            if args[i].hasPrefix("--"), i + 1 < args.count {
                options[String(args[i].dropFirst(2))] = args[i + 1]
                i += 2
            } else {
                print("unexpected argument \(args[i])")
                return 64
            }
        }
        do {
            switch name {
            case "upload-replay": try await replay(options)
            case "upload-resume": try await resume(options)
            case "upload-seed": try await seedCommand(options)
            default: return 64
            }
            return 0
        } catch {
            print("error: \(error)")
            return 1
        }
    }

    static let meter: MeterInfo = {
        var m = MeterInfo(address: "00:60:19:01:0E:92", timeZone: "Europe/Berlin")
        m.model = "CareSens"
        m.serial = "BENCH0001"
        return m
    }()

    static func reading(_ n: Int) -> NewReading {
        let instant: Int64 = 1_735_714_800_000 + Int64(n) * 60_000  // 2025-01-01T07:00Z, one a minute
        let local = GlucoseDateTime(naiveSeconds: instant / 1000 + 3600)  // Europe/Berlin in winter
        return NewReading(
            meterAddress: meter.address, sequence: n, baseTime: local, timeOffsetMinutes: 0, userFacingTime: local,
            utcOffsetMinutes: 60,
            meterInstant: instant, instant: instant, mgdl: Double(80 + n % 120), mmoll: nil, special: nil, unit: .kilogramPerLitre,
            type: 1, sampleLocation: 1, sensorStatus: nil, analyte: .glucose, context: nil, rawMeasurement: [0x00],
            rawContext: nil, receivedAt: instant, exclusion: nil)
    }

    static func seed(_ store: SQLiteStore, count: Int) async throws {
        try await store.saveMeter(meter)
        var n = 0
        while n < count {
            let chunk = (n..<min(count, n + 500)).map(reading)
            try await store.insert(chunk)
            n += chunk.count
        }
    }

    static func seedCommand(_ o: [String: String]) async throws {
        guard let path = o["database"] else { throw BenchError("--database is required") }
        var builders: [any OutboxBodyBuilder] = [NightscoutBodyBuilder()]
        if let subject = o["fhir-subject"] { builders.append(FHIRBodyBuilder(subject: subject)) }
        let store = try SQLiteStore(path: path, builders: builders)
        try await seed(store, count: Int(o["count"] ?? "1000") ?? 1000)
        await store.close()
        print("seeded \(o["count"] ?? "1000") readings into \(path)")
    }

    static func temporaryDatabase() throws -> String {
        var template = Array("/tmp/gg-upload-bench-XXXXXX".utf8CString)
        guard let dir = mkdtemp(&template) else { throw BenchError("mkdtemp failed") }
        return String(cString: dir) + "/bench.sqlite3"
    }

    static func replay(_ o: [String: String]) async throws {
        let count = Int(o["count"] ?? "10000") ?? 10_000
        let server = try Server(script: o["server"] ?? "SystemTests/fake_nightscout.py")
        defer { server.stop() }
        let path = try temporaryDatabase()
        let store = try SQLiteStore(path: path, builders: [NightscoutBodyBuilder()])
        try await seed(store, count: count)
        let http = CountingClient()
        let settings = UploadSettings(nightscout: NightscoutSettings(url: server.url, apiSecret: Secret(Server.secret)))
        let uploader = Uploader(settings: settings, store: store, http: http, logger: .silent)
        try await uploader.prepare()
        let clock = ContinuousClock()
        let start = clock.now
        let outcome = await uploader.drain(deadline: nil)
        let elapsed = clock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let stored = try await server.count()
        print("upload-replay: \(outcome.uploaded) readings in \(String(format: "%.3f", seconds)) s, \(http.requests) requests, "
              + "\(Int(Double(outcome.uploaded) / seconds)) readings/s; server holds \(stored); pending \(outcome.pending)")
        await store.close()
    }

    static func resume(_ o: [String: String]) async throws {
        let mode = o["mode"] ?? "event"
        let runs = Int(o["runs"] ?? "5") ?? 5
        var results: [Double] = []
        for _ in 0..<runs {
            let server = try Server(script: o["server"] ?? "SystemTests/fake_nightscout.py")
            defer { server.stop() }
            let path = try temporaryDatabase()
            let store = try SQLiteStore(path: path, builders: [NightscoutBodyBuilder()])
            try await seed(store, count: 1000)
            let hub = ConnectivityHub(initial: .up)
            let recovery = RecoverySettings(retryCount: 3, networkTimeoutMs: 3000, healthCheckURL: server.healthURL, recoveryMode: true)
            let settings = UploadSettings(recovery: recovery, nightscout: NightscoutSettings(url: server.url, apiSecret: Secret(Server.secret)))
            let uploader = Uploader(settings: settings, store: store, connectivity: hub, logger: .silent,
                                    loopbackIgnoresConnectivity: false)
            try await server.control(#"{"mode":"slow","delay_ms":300,"times":2}"#)
            let drain = Task { await uploader.drain(deadline: ContinuousClock.now.advanced(by: .seconds(180))) }
            try await Task.sleep(for: .milliseconds(150))
            hub.report(.down, source: mode == "event" ? "networkmanager" : "netlink")
            try await server.control(#"{"mode":"down","health":"down"}"#)
            try await Task.sleep(for: .milliseconds(1500))
            let before = try await store.counts(.nightscout).acknowledged
            try await server.control(#"{"mode":"up","health":"up"}"#)
            let up = ContinuousClock.now
            if mode == "event" { hub.report(.up, source: "networkmanager") }
            while try await store.counts(.nightscout).acknowledged == before {
                try await Task.sleep(for: .milliseconds(2))
            }
            let latency = ContinuousClock.now - up
            results.append(Double(latency.components.seconds) + Double(latency.components.attoseconds) / 1e18)
            _ = await drain.value
            await store.close()
        }
        let sorted = results.sorted()
        print("upload-resume (\(mode)): network back -> first batch acknowledged: median \(String(format: "%.3f", sorted[sorted.count / 2])) s, "
              + "min \(String(format: "%.3f", sorted.first ?? 0)) s, max \(String(format: "%.3f", sorted.last ?? 0)) s over \(runs) runs")
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

final class CountingClient: HTTPClient {
    let inner = CurlHTTPClient()
    private let counter = Mutex(0)
    var requests: Int { counter.withLock { $0 } }
    func send(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
        counter.withLock { $0 += 1 }
        return try await inner.send(request)
    }
}

/// The loopback Nightscout double as a child process (killed by pid in `stop`).
final class Server: Sendable {
    static let secret = "correct-horse-battery"
    let pid: Int32
    let port: Int
    let controlPort: Int
    let healthPort: Int
    private let process: Process

    init(script: String) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        p.arguments = [script, "--delay-401", "0", "--secret", Self.secret]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        var line = Data()
        while !line.contains(0x0A) {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        guard let json = try? JSONSerialization.jsonObject(with: line) as? [String: Int], let port = json["port"],
              let control = json["control_port"], let health = json["health_port"] else {
            kill(p.processIdentifier, SIGKILL)
            throw BenchError("\(script) did not start (run from the repository root or pass --server)")
        }
        process = p
        pid = p.processIdentifier
        self.port = port
        controlPort = control
        healthPort = health
    }

    var url: String { "http://127.0.0.1:\(port)" }
    var healthURL: String { "http://127.0.0.1:\(healthPort)/" }

    func stop() {
        kill(pid, SIGKILL)
        process.waitUntilExit()
    }

    func control(_ json: String) async throws {
        _ = try await CurlHTTPClient().send(HTTPRequest(method: "POST", url: "http://127.0.0.1:\(controlPort)/__control",
                                                        body: Array(json.utf8), connectTimeoutMs: 2000, timeoutMs: 10_000))
    }

    func reset() async throws {
        _ = try await CurlHTTPClient().send(HTTPRequest(method: "POST", url: "http://127.0.0.1:\(controlPort)/__reset",
                                                        body: [], connectTimeoutMs: 2000, timeoutMs: 10_000))
    }

    func count() async throws -> Int {
        let r = try await CurlHTTPClient().send(HTTPRequest(method: "GET", url: "http://127.0.0.1:\(controlPort)/__stats", connectTimeoutMs: 2000, timeoutMs: 10_000))
        return ((try? JSONSerialization.jsonObject(with: Data(r.body))) as? [String: Any])?["count"] as? Int ?? -1
    }
}
