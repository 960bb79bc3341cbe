import Foundation
import GatewayCore
import GlucoseProfile
import Support
import SyncEngine
import Synchronization
import TestSupport
import Transport

/// The repository root, found from this file's path.
let repositoryRoot: String = {
    var url = URL(fileURLWithPath: #filePath)
    for _ in 0..<3 { url.deleteLastPathComponent() }
    return url.path
}()

/// A loopback test server script as a child process; it prints one JSON line with its ports.
/// Killed by pid when the owner goes away.
final class ChildServer: @unchecked Sendable {
    // @unchecked: the Process is set up in init and only terminated afterwards; fields are immutable.
    let process: Process
    let info: [String: Any]

    init(python: String = "/usr/bin/python3", script: String, arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = ["\(repositoryRoot)/SystemTests/\(script)"] + arguments
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        self.process = process
        var line = Data()
        let deadline = Date().addingTimeInterval(20)
        while !line.contains(0x0A), Date() < deadline {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        guard let json = try? JSONSerialization.jsonObject(with: line) as? [String: Any], json["port"] is Int else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw TestFailure("\(script) did not start")
        }
        info = json
    }

    deinit { stop() }

    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    func port(_ key: String) -> Int { info[key] as? Int ?? 0 }
}

/// `SystemTests/fake_nightscout.py`.
final class FakeNightscout: Sendable {
    let child: ChildServer
    let port: Int
    let controlPort: Int
    let healthPort: Int
    static let secret = "correct-horse-battery"

    init(delay401: Double = 0.05, extra: [String] = []) throws {
        child = try ChildServer(script: "fake_nightscout.py", arguments: ["--delay-401", String(delay401), "--secret", Self.secret] + extra)
        port = child.port("port")
        controlPort = child.port("control_port")
        healthPort = child.port("health_port")
    }

    func stop() { child.stop() }

    var url: String { "http://127.0.0.1:\(port)" }
    var healthURL: String { "http://127.0.0.1:\(healthPort)/" }

    func control(_ body: [String: Any]) async throws {
        let data = try JSONSerialization.data(withJSONObject: body)
        _ = try await call("POST", "/__control", data)
    }

    func entries() async throws -> [[String: Any]] {
        let data = try await call("GET", "/__entries", nil)
        return (try JSONSerialization.jsonObject(with: data) as? [[String: Any]]) ?? []
    }

    func stats() async throws -> [String: Any] {
        let data = try await call("GET", "/__stats", nil)
        return (try JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
    }

    private func call(_ method: String, _ path: String, _ body: Data?) async throws -> Data {
        let request = HTTPRequest(method: method, url: "http://127.0.0.1:\(controlPort)\(path)",
                                  headers: [("Content-Type", "application/json")], body: body.map { Array($0) } ?? [],
                                  connectTimeoutMs: 2000, timeoutMs: 10_000)
        let response = try await CurlHTTPClient().send(request)
        guard response.status == 200 else { throw TestFailure("control \(path) answered \(response.status)") }
        return Data(response.body)
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Counts requests per URL path prefix, around a real client.
final class CountingHTTPClient: HTTPClient {
    let inner: any HTTPClient
    private let counts = Mutex<[String: Int]>([:])
    init(_ inner: any HTTPClient = CurlHTTPClient()) { self.inner = inner }
    func send(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
        let path = request.url.split(separator: "/", maxSplits: 3).dropFirst(2).first.map { "/" + $0 } ?? request.url
        counts.withLock { $0[path, default: 0] += 1 }
        return try await inner.send(request)
    }
    func count(_ pathPrefix: String) -> Int {
        counts.withLock { $0.filter { $0.key.hasPrefix(pathPrefix) }.values.reduce(0, +) }
    }
}

/// Fast timings so recovery tests take seconds, not minutes.
func fastTiming() -> UploadTiming {
    var t = UploadTiming()
    t.retryBase = .milliseconds(20)
    t.retryCap = .milliseconds(200)
    t.longBackoffBase = .milliseconds(100)
    t.longBackoffCap = .milliseconds(1000)
    t.probeBase = .milliseconds(50)
    t.probeCap = .milliseconds(300)
    t.credentialTimeout = .seconds(5)
    return t
}

func nightscoutSettings(_ server: FakeNightscout, recovery: RecoverySettings) -> UploadSettings {
    UploadSettings(recovery: recovery, nightscout: NightscoutSettings(url: server.url, apiSecret: Secret(FakeNightscout.secret)))
}

func deadline(seconds: Double) -> ContinuousClock.Instant {
    ContinuousClock.now.advanced(by: .milliseconds(Int(seconds * 1000)))
}

/// An outbox of `count` synthetic readings (`TestSupport.syntheticReading`), queued for Nightscout unless told.
func filledStore(_ count: Int, builders: [any OutboxBodyBuilder] = [NightscoutBodyBuilder()]) async -> FakeOutboxStore {
    await filledOutbox(count, builders: builders)
}
