import Foundation
import GatewayCore
import Support
import SyncEngine
import Testing
import TestSupport

/// Every fault of the loopback Nightscout during a 1,000-reading replay, then recovery: the server ends
/// with each reading exactly once, never two requests at a time, and the queue empty.
@Suite("Recovery", .serialized, .timeLimit(.minutes(3)))
struct RecoveryTests {
    struct Fault: CustomStringConvertible, Sendable {
        var name: String
        var control: [String: String]
        /// Bring the API back up once the session waits for the network (for `down`).
        var upWhenRecovering = false
        var description: String { name }
    }

    static let faults: [Fault] = [
        Fault(name: "500 three times", control: ["mode": "status", "status": "500", "times": "3", "after": "3"]),
        Fault(name: "429 with Retry-After", control: ["mode": "status", "status": "429", "retry_after": "1", "times": "1", "after": "2"]),
        Fault(name: "hangs past the timeout", control: ["mode": "hang", "hang_s": "2", "times": "2", "after": "4"]),
        Fault(name: "answers slowly (commits after the timeout)", control: ["mode": "slow", "delay_ms": "700", "times": "3", "after": "1"]),
        Fault(name: "commits then drops the connection", control: ["mode": "commit_drop", "times": "3", "after": "2"]),
        Fault(name: "refuses connections (network down)", control: ["mode": "down", "health": "down"], upWhenRecovering: true),
    ]

    @Test(arguments: faults)
    func faultDuringReplayThenRecovery(_ fault: Fault) async throws {
        let server = try FakeNightscout()
        var control: [String: Any] = [:]
        for (k, v) in fault.control { control[k] = Int(v) ?? v }
        try await server.control(control)
        let store = await filledStore(1000)
        let recovery = RecoverySettings(retryCount: 6, networkTimeoutMs: 400, healthCheckURL: server.healthURL, recoveryMode: true)
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: recovery), store: store, logger: .silent, timing: fastTiming())
        try await uploader.prepare()
        if fault.upWhenRecovering {
            Task {
                // Up again once the dispatcher reports that it waits for the network, however long a loaded
                // machine takes to get there.
                _ = await waitUntil(60) { (try? await store.destinationState(.nightscout))?.state == .recovering }
                try await server.control(["mode": "up", "health": "up"])
            }
        }
        let outcome = await uploader.drain(deadline: deadline(seconds: 60))
        #expect(outcome.uploaded == 1000, "\(outcome.reports)")
        #expect(!outcome.deferred)
        let entries = try await server.entries()
        let identifiers = entries.compactMap { $0["identifier"] as? String }
        #expect(entries.count == 1000)
        #expect(Set(identifiers).count == 1000)
        let stats = try await server.stats()
        #expect(stats["max_in_flight"] as? Int == 1)
        #expect(try await store.counts(.nightscout).acknowledged == 1000)
        if !fault.upWhenRecovering {
            #expect(((stats["faults"] as? [String: Int]) ?? [:]).values.reduce(0, +) > 0, "the fault was never injected")
        }
    }

    struct Classification: CustomStringConvertible, Sendable {
        var name: String
        var apiDown: Bool
        var healthURL: Bool
        var healthDown: Bool
        var unresolvable: Bool
        var mode: String?
        var expected: Int
        var description: String { name }
    }

    @Test(arguments: [
        Classification(name: "refused, probe refused -> 1001", apiDown: true, healthURL: true, healthDown: true, unresolvable: false, mode: nil, expected: 1001),
        Classification(name: "refused, probe answers -> 1002", apiDown: true, healthURL: true, healthDown: false, unresolvable: false, mode: nil, expected: 1002),
        Classification(name: "no probe URL, DNS failure -> 1001", apiDown: false, healthURL: false, healthDown: false, unresolvable: true, mode: nil, expected: 1001),
        Classification(name: "no probe URL, timeout -> 1002", apiDown: false, healthURL: false, healthDown: false, unresolvable: false, mode: "hang", expected: 1002),
        Classification(name: "no probe URL, 500 -> 1002", apiDown: false, healthURL: false, healthDown: false, unresolvable: false, mode: "status", expected: 1002),
        Classification(name: "hang, probe answers -> 1002", apiDown: false, healthURL: true, healthDown: false, unresolvable: false, mode: "hang", expected: 1002),
    ])
    func networkErrorCodes(_ c: Classification) async throws {
        let server = try FakeNightscout()
        if c.apiDown { try await server.control(["mode": "down"]) }
        if c.healthDown { try await server.control(["health": "down"]) }
        if let mode = c.mode { try await server.control(["mode": mode, "status": 500, "hang_s": 3]) }
        let store = await filledStore(10)
        let recovery = RecoverySettings(retryCount: 1, networkTimeoutMs: 300, healthCheckURL: c.healthURL ? server.healthURL : nil, recoveryMode: false)
        var settings = nightscoutSettings(server, recovery: recovery)
        if c.unresolvable { settings.nightscout?.url = "http://gateway-test.invalid" }
        let uploader = Uploader(settings: settings, store: store, logger: .silent, timing: fastTiming())
        let outcome = await uploader.drain(deadline: deadline(seconds: 30))
        #expect(outcome.deferred)
        #expect(outcome.reports.first?.end.code == c.expected, "\(String(describing: outcome.reports.first?.end))")
        let state = try await store.destinationState(.nightscout)
        #expect(state?.lastErrorCode == c.expected)
        #expect(state?.state == .backoff)
        #expect(try await store.counts(.nightscout).pending == 10)
    }

    @Test func recoveryModeKeepsTheSessionWithoutSpendingRetries() async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "down", "health": "down"])
        let store = await filledStore(300)
        let http = CountingHTTPClient()
        // retry_count 0: a single counted failure would end the session; waiting for the network is free.
        let recovery = RecoverySettings(retryCount: 0, networkTimeoutMs: 300, healthCheckURL: server.healthURL, recoveryMode: true)
        let clock = ManualClock()
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: recovery), store: store, http: http, logger: .silent,
                                timing: fastTiming(), clock: clock)
        let drain = Task { await uploader.drain(deadline: clock.now + .seconds(30)) }
        // Each probe interval ends when the test says so: two probes of the health URL (the server's root,
        // counted under its full URL) while the network is down, then it comes back.
        for _ in 0..<2 {
            try #require(await waitUntil(20) { clock.sleeping > 0 })
            let before = http.count("http")
            clock.advance(by: fastTiming().probeCap)
            try #require(await waitUntil(20) { http.count("http") > before })
        }
        try await server.control(["mode": "up", "health": "up"])
        try #require(await waitUntil(20) { clock.sleeping > 0 })
        clock.advance(by: fastTiming().probeCap)
        let outcome = await drain.value
        #expect(outcome.uploaded == 300)
        #expect(!outcome.deferred)
        #expect(http.count("/") > 1, "the health URL was probed while waiting")
        #expect(try await server.stats()["count"] as? Int == 300)
    }

    @Test func aRecoveringSessionWaitsUntilItsDeadlineThenEndsWithEverythingPending() async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "down", "health": "down"])
        let store = await filledStore(40)
        let recovery = RecoverySettings(retryCount: 0, networkTimeoutMs: 300, healthCheckURL: server.healthURL, recoveryMode: true)
        let clock = ManualClock()
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: recovery), store: store, logger: .silent,
                                timing: fastTiming(), clock: clock)
        let start = clock.now
        let deadline = start + .seconds(2)
        let drain = Task { await uploader.drain(deadline: deadline) }
        // Every probe interval before the deadline ends with the session waiting again: it does not give up
        // while the network stays down.
        var waits = 0
        while true {
            try #require(await waitUntil(20) { clock.sleeping > 0 }, "the session waits for the network")
            let next = try #require(clock.deadlines.first)
            if next >= deadline { break }
            clock.advance(by: clock.now.duration(to: next))
            waits += 1
        }
        #expect(waits > 1)
        #expect(try await store.destinationState(.nightscout)?.state == .recovering)
        // The last wait ends at the deadline, and with it the session.
        clock.advance(by: clock.now.duration(to: deadline) + .milliseconds(1))
        let outcome = await drain.value
        #expect(outcome.deferred)
        #expect(outcome.uploaded == 0)
        #expect(try await store.counts(.nightscout).pending == 40)
    }

    @Test func recoveryModeOffMakesOnePlusRetryCountAttempts() async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "down", "health": "down"])
        let store = await filledStore(300)
        let http = CountingHTTPClient()
        let recovery = RecoverySettings(retryCount: 2, networkTimeoutMs: 300, healthCheckURL: server.healthURL, recoveryMode: false)
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: recovery), store: store, http: http, logger: .silent, timing: fastTiming())
        let outcome = await uploader.drain(deadline: deadline(seconds: 30))
        #expect(outcome.deferred)
        #expect(outcome.exitStatus(errorBypass: false) == .tempFail)
        #expect(outcome.reports.first?.end.code == 1001)
        #expect(http.count("/api") == 3)
        #expect(try await store.counts(.nightscout).pending == 300)
    }

    @Test func networkAlreadyDownReportsAtOnce() async throws {
        let server = try FakeNightscout()
        let hub = ConnectivityHub()
        hub.report(.down, source: "networkmanager")
        let store = await filledStore(5)
        let http = CountingHTTPClient()
        // A clock that never moves: the session must end without waiting for anything.
        let clock = ManualClock()
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings()), store: store, http: http,
                                connectivity: hub, logger: .silent, timing: fastTiming(), loopbackIgnoresConnectivity: false, clock: clock)
        let outcome = await uploader.drain(deadline: clock.now + .seconds(30))
        #expect(outcome.reports.first?.end.code == 1001)
        #expect(http.count("/") == 0)
        #expect(clock.sleeping == 0)
    }

    @Test func errorBypassQuarantinesThePoisonReadingAndTheRestContinue() async throws {
        let server = try FakeNightscout()
        let store = await filledStore(200)
        let poison = try #require(await store.rows.first { $0.readingID == 137 })
        try await server.control(["poison": [poison.key]])
        let recovery = RecoverySettings(retryCount: 1, networkTimeoutMs: 2000, errorBypass: true)
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: recovery), store: store, logger: .silent, timing: fastTiming())
        let outcome = await uploader.drain(deadline: deadline(seconds: 30))
        #expect(outcome.uploaded == 199)
        #expect(outcome.quarantined == 1)
        #expect(outcome.pending == 0)
        #expect(!outcome.deferred)
        #expect(await store.state(of: poison.id) == .quarantined)
        #expect(await store.answers[poison.id]?.contains("HTTP 400") == true)
        #expect(try await server.stats()["count"] as? Int == 199)
        // Fixed on the server: redrive sends it, nothing was lost.
        try await server.control(["poison": [String]()])
        #expect(try await uploader.redrive() == 1)
        let again = await uploader.drain(deadline: deadline(seconds: 30))
        #expect(again.uploaded == 1)
        #expect(try await server.stats()["count"] as? Int == 200)
    }

    @Test func withoutErrorBypassThePoisonReadingBlocksItsDestination() async throws {
        let server = try FakeNightscout()
        let store = await filledStore(200)
        let poison = try #require(await store.rows.first { $0.readingID == 137 })
        try await server.control(["poison": [poison.key]])
        let recovery = RecoverySettings(retryCount: 1, networkTimeoutMs: 2000, errorBypass: false)
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: recovery), store: store, logger: .silent, timing: fastTiming())
        let outcome = await uploader.drain(deadline: deadline(seconds: 30))
        guard case .blocked(let code, _)? = outcome.reports.first?.end else {
            Issue.record("expected blocked, got \(String(describing: outcome.reports.first?.end))")
            return
        }
        #expect(code == 400)
        #expect(outcome.quarantined == 0)
        #expect(outcome.deferred)
        #expect(outcome.exitStatus(errorBypass: false) == .tempFail)
        #expect(await store.state(of: poison.id) == .pending)
        let counts = try await store.counts(.nightscout)
        #expect(counts.acknowledged + counts.pending == 200)
        #expect(try await server.stats()["count"] as? Int == counts.acknowledged)
        #expect(try await store.destinationState(.nightscout)?.state == .blocked)
    }

    @Test func wrongCredentialsPauseThenFixedResume() async throws {
        let server = try FakeNightscout(delay401: 0.3)
        let store = await filledStore(120)
        var settings = nightscoutSettings(server, recovery: RecoverySettings(retryCount: 2, networkTimeoutMs: 2000))
        settings.nightscout?.apiSecret = Secret("wrong-secret-value")
        let log = MemoryLogSink()
        let logger = Logger(label: "t", minimumLevel: .debug, sink: log)
        let wrong = Uploader(settings: settings, store: store, logger: logger, timing: fastTiming())
        let outcome = await wrong.drain(deadline: deadline(seconds: 30))
        guard case .paused(let code, _)? = outcome.reports.first?.end else {
            Issue.record("expected paused, got \(String(describing: outcome.reports.first?.end))")
            return
        }
        #expect(code == 401)
        let counts = try await store.counts(.nightscout)
        #expect(counts.pending == 120 && counts.quarantined == 0)
        #expect(try await store.destinationState(.nightscout)?.state == .paused)
        #expect(!log.entries.joined().contains("wrong-secret-value"))
        #expect(!log.entries.joined().contains(SHA1.hex("wrong-secret-value".utf8)))
        // A check with a timeout shorter than the server's delay cannot tell; the long check can.
        let checks = await wrong.checkCredentials()
        guard case .refused? = checks.first?.1 else {
            Issue.record("expected refused, got \(String(describing: checks.first?.1))")
            return
        }
        // Fixed in the config: the paused destination checks the credentials first, then uploads.
        let fixed = Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings(networkTimeoutMs: 2000)), store: store,
                             logger: logger, timing: fastTiming())
        try await fixed.prepare()
        let after = await fixed.drain(deadline: deadline(seconds: 30))
        #expect(after.uploaded == 120)
        #expect(!after.deferred)
        #expect(try await store.destinationState(.nightscout)?.state == .ok)
        #expect(try await server.stats()["count"] as? Int == 120)
    }

    @Test func alertCommandRunsOncePerStateChangeWithTheErrorInItsEnvironment() async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "down", "health": "down"])
        let store = await filledStore(7)
        let file = NSTemporaryDirectory() + "gg-alert-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { unlink(file) }
        let script = "printf '%s|%s|%s\\n' \"$GATEWAY_ERROR_CODE\" \"$GATEWAY_PENDING\" \"$GATEWAY_ERROR_MESSAGE\" >> \(file)"
        let recovery = RecoverySettings(retryCount: 3, networkTimeoutMs: 300, healthCheckURL: server.healthURL, recoveryMode: false,
                                        onNetworkError: script)
        let log = MemoryLogSink()
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: recovery), store: store,
                                logger: Logger(label: "t", minimumLevel: .info, sink: log), timing: fastTiming())
        _ = await uploader.drain(deadline: deadline(seconds: 30))
        func alerts() -> [Substring] { (try? String(contentsOfFile: file, encoding: .utf8))?.split(separator: "\n") ?? [] }
        // The commands run in the background: wait for the two expected lines, then look at what arrived.
        _ = await waitUntil(10) { alerts().count >= 2 }
        let lines = alerts()
        // retrying -> backoff: two state changes, two alerts (not one per attempt).
        #expect(lines.count == 2, "\(lines)")
        #expect(lines.allSatisfy { $0.hasPrefix("1001|7|network not connected") }, "\(lines)")
        let logged = log.entries.filter { $0.contains("1001 NETWORK_NOT_CONNECTED") }
        #expect(logged.count == 2, "\(log.entries)")
    }
}

extension SessionEnd {
    var code: Int? {
        switch self {
        case .drained: nil
        case .deferred(let c, _), .paused(let c, _), .blocked(let c, _): c
        }
    }
}
