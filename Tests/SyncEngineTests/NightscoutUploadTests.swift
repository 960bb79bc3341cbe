import GatewayCore
import SyncEngine
import Testing
import TestSupport

/// Uploads to the loopback Nightscout double (`tests/fake_nightscout.py`).
@Suite("Nightscout upload", .serialized, .timeLimit(.minutes(2)))
struct NightscoutUploadTests {
    @Test func thousandReadingsExactlyOnceInBatchesOfHundred() async throws {
        let server = try FakeNightscout()
        let store = await filledStore(1000)
        let http = CountingHTTPClient()
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings()), store: store, http: http,
                                logger: .silent, timing: fastTiming())
        try await uploader.prepare()
        let outcome = await uploader.drain(deadline: deadline(seconds: 60))
        #expect(outcome.uploaded == 1000)
        #expect(outcome.pending == 0)
        #expect(!outcome.deferred)
        #expect(outcome.exitStatus(errorBypass: false) == .ok)
        #expect(http.count("/api") == 10)
        let stats = try await server.stats()
        #expect(stats["count"] as? Int == 1000)
        #expect(stats["max_in_flight"] as? Int == 1)
        // Sending again changes nothing on the server: every element comes back without `_id`.
        _ = try await store.redrive(.nightscout)  // nothing quarantined: a no-op
        #expect(try await store.counts(.nightscout).acknowledged == 1000)
    }

    @Test func duplicatesAreRecognisedAsStored() async throws {
        let server = try FakeNightscout()
        let first = await filledStore(50)
        let settings = nightscoutSettings(server, recovery: RecoverySettings())
        _ = await Uploader(settings: settings, store: first, logger: .silent, timing: fastTiming()).drain(deadline: deadline(seconds: 20))
        // A second gateway (or a restored database) sends the same readings: acknowledged as duplicates.
        let second = await filledStore(50)
        let outcome = await Uploader(settings: settings, store: second, logger: .silent, timing: fastTiming()).drain(deadline: deadline(seconds: 20))
        #expect(outcome.uploaded == 50)
        #expect(outcome.reports.first?.duplicates == 50)
        #expect(try await server.stats()["count"] as? Int == 50)
    }

    @Test func emptyAnswerIsNotSuccess() async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "empty"])
        let store = await filledStore(4)
        let recovery = RecoverySettings(retryCount: 0, errorBypass: false)
        let outcome = await Uploader(settings: nightscoutSettings(server, recovery: recovery), store: store, logger: .silent,
                                     timing: fastTiming()).drain(deadline: deadline(seconds: 20))
        #expect(outcome.uploaded == 0)
        #expect(outcome.deferred)
        #expect(outcome.pending == 4)
        guard case .blocked = outcome.reports.first?.end else {
            Issue.record("expected blocked, got \(String(describing: outcome.reports.first?.end))")
            return
        }
    }
}

@Suite("Daemon service", .serialized, .timeLimit(.minutes(1)))
struct DaemonServiceTests {
    @Test func uploadsNewReadingsWhenToldAndStopsOnCancellation() async throws {
        let server = try FakeNightscout()
        let store = FakeOutboxStore()
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings()), store: store,
                                connectivity: ConnectivityHub(), logger: .silent, timing: fastTiming())
        try await uploader.prepare()
        let service = Task { await uploader.run(idleCheckMs: 60_000) }
        await store.enqueue(syntheticReading(1), meter: testMeter, builders: [NightscoutBodyBuilder()], createdAt: 1)
        uploader.notifyNewReadings()
        #expect(await waitUntil(5) { (try? await server.stats()["count"] as? Int) == 1 })
        for n in 2...11 { await store.enqueue(syntheticReading(n), meter: testMeter, builders: [NightscoutBodyBuilder()], createdAt: Int64(n)) }
        uploader.notifyNewReadings()
        #expect(await waitUntil(5) { (try? await server.stats()["count"] as? Int) == 11 })
        let status = try await uploader.status(now: 1_000_000)
        #expect(status.first?.counts.acknowledged == 11)
        #expect(status.first?.counts.pending == 0)
        #expect(status.first?.oldestUnsentAgeSeconds == nil)
        #expect(status.first?.state.state == "ok")
        #expect(status.first?.state.lastSuccessAt != nil)
        let stopped = ContinuousClock.now
        service.cancel()
        await service.value
        #expect(ContinuousClock.now - stopped < .seconds(2))
    }

    @Test func statusShowsTheLastErrorAndTheOldestUnsentReading() async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "status", "status": 503])
        let store = await filledStore(3)
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings(retryCount: 0)), store: store,
                                logger: .silent, timing: fastTiming())
        _ = await uploader.drain(deadline: deadline(seconds: 10))
        let status = try #require(try await uploader.status(now: 60_000).first)
        #expect(status.state.state == "backoff")
        #expect(status.state.lastErrorCode == 1002)
        #expect(status.state.lastErrorMessage?.contains("HTTP 503") == true)
        #expect(status.counts.pending == 3)
        #expect(status.oldestUnsentAgeSeconds == 60)
    }
}
