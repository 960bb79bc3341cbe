import GatewayCore
import Support
import SyncEngine
import Testing
import TestSupport
import Transport

/// Uploads to the loopback Nightscout double (`SystemTests/fake_nightscout.py`).
@Suite("Nightscout upload", .serialized, .timeLimit(.minutes(2)))
struct NightscoutUploadTests {
    @Test func thousandReadingsExactlyOnceInBatchesOfTwoHundred() async throws {
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
        #expect(http.count("/api") == 5)
        let stats = try await server.stats()
        #expect(stats["count"] as? Int == 1000)
        #expect(stats["max_in_flight"] as? Int == 1)
        // Sending again changes nothing on the server: every element comes back without `_id`.
        _ = try await store.redrive(.nightscout)  // nothing quarantined: a no-op
        #expect(try await store.counts(.nightscout).acknowledged == 1000)
    }

    @Test func aDrainingBacklogSavesItsSuccessTimeOncePerIntervalAndAtTheEnd() async throws {
        // Ten batches within one interval from the session's start: only the end is written, not every
        // batch (each write is a commit of its own); a later session with nothing to send writes nothing.
        let server = try FakeNightscout()
        let store = await filledStore(1000)
        let clock = ManualClock()
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings()), store: store,
                                logger: .silent, timing: fastTiming(), clock: clock)
        try await uploader.prepare()
        let outcome = await uploader.drain(deadline: deadline(seconds: 60))
        #expect(outcome.uploaded == 1000)
        let saves = await store.stateSaves
        #expect(saves == 1, "saved \(saves) times")
        // The acknowledgements were not synced each, and that one save is the synced commit after them.
        #expect(await store.acknowledgedUnsynced.isEmpty)
        let state = try #require(try await store.destinationState(.nightscout))
        #expect(state.state == .ok)
        #expect(state.lastErrorCode == nil)
        #expect(try #require(state.lastSuccessAt) > 0)
        #expect(await uploader.drain(deadline: deadline(seconds: 60)).uploaded == 0)
        #expect(await store.stateSaves == 1)
        #expect(try await store.destinationState(.nightscout) == state)
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
        // `200 []` stored nothing, but the server is up: sent again like after a 5xx, then backoff (75).
        guard case .deferred(code: NetworkErrorCode.timeout, _) = outcome.reports.first?.end else {
            Issue.record("expected deferred 1002, got \(String(describing: outcome.reports.first?.end))")
            return
        }
        #expect(outcome.exitStatus(errorBypass: false) == .tempFail)
    }

    struct UnconfirmingAnswer: CustomTestStringConvertible, Sendable {
        var answer: String
        /// Of the 4 readings sent, how many the answer confirms.
        var confirmed: Int
        var testDescription: String { "200 with \(answer)" }
    }

    /// A Nightscout or a proxy answering 200 with an array that does not confirm the readings: none of
    /// them may be marked uploaded; they are sent again like after a 5xx and end in backoff (exit 75).
    @Test(arguments: [
        UnconfirmingAnswer(answer: "non_entries", confirmed: 0),
        UnconfirmingAnswer(answer: "fewer", confirmed: 3),
        UnconfirmingAnswer(answer: "foreign", confirmed: 0),
    ])
    func aTwoHundredAcknowledgesOnlyTheEntriesItConfirms(_ c: UnconfirmingAnswer) async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "answer", "answer": c.answer])
        let store = await filledStore(4)
        let http = CountingHTTPClient()
        let recovery = RecoverySettings(retryCount: 2, errorBypass: true)
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: recovery), store: store, http: http, logger: .silent,
                                timing: fastTiming())
        let outcome = await uploader.drain(deadline: deadline(seconds: 20))
        #expect(outcome.uploaded == c.confirmed)
        let counts = try await store.counts(.nightscout)
        #expect(counts.acknowledged == c.confirmed)
        #expect(counts.pending == 4 - c.confirmed)
        #expect(counts.quarantined == 0)  // not refused by the server: never quarantined, even with error_bypass
        #expect(outcome.deferred)
        #expect(outcome.exitStatus(errorBypass: false) == .tempFail)
        guard case .deferred(code: NetworkErrorCode.timeout, let message)? = outcome.reports.first?.end else {
            Issue.record("expected deferred 1002, got \(String(describing: outcome.reports.first?.end))")
            return
        }
        #expect(message.contains("HTTP 200"), "\(message)")
        #expect(http.count("/api") == 1 + recovery.retryCount)  // retried like a 5xx
        let state = try #require(try await uploader.status(now: 0).first).state
        #expect(state.state == .backoff)
        #expect(state.lastErrorCode == 1002)
    }

    /// An answer without `identifier` (a server that keeps only the fields it knows) still confirms each
    /// element by type, date and mbg.
    @Test func entriesWithoutIdentifierAreMatchedByTypeDateAndValue() async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "answer", "answer": "no_identifier"])
        let store = await filledStore(6)
        let outcome = await Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings(retryCount: 0)), store: store,
                                     logger: .silent, timing: fastTiming()).drain(deadline: deadline(seconds: 20))
        #expect(outcome.uploaded == 6)
        #expect(!outcome.deferred)
    }

    /// An element that carries a reading's identifier but another value still counts by identifier;
    /// an element without identifier whose value differs from every reading sent counts for none.
    @Test func aFingerprintMustMatchTypeDateAndValue() async throws {
        let store = await filledStore(2)
        let items = try await store.claimPending(.nightscout, limit: 10)
        let date = try #require(try JSONParser.parse(items[0].body)["date"]?.int64Value)
        // The first reading's type and date, another value, no identifier; then the second one as sent.
        let text = #"[{"type":"mbg","mbg":999,"date":\#(date),"_id":"1"},"# + String(decoding: items[1].body, as: UTF8.self) + "]"
        let answer = HTTPResponse(status: 200, body: Array(text.utf8))
        let destination = NightscoutDestination(settings: NightscoutSettings(url: "http://127.0.0.1:9", apiSecret: Secret(FakeNightscout.secret)),
                                                http: FixedHTTPClient(answer))
        guard case let .perElement(stored, _, rejected, retry, _) = await destination.send(items, networkTimeoutMs: 1000) else {
            Issue.record("expected a per-element outcome")
            return
        }
        #expect(stored == [items[1].id])
        #expect(retry == [items[0].id])
        #expect(rejected.isEmpty)
    }

    /// A server error body that reflects our api-secret (or its SHA-1) is redacted before it is stored,
    /// and cut to one short line without control characters.
    @Test func aReflectedSecretInAnErrorBodyIsRedactedAndBounded() async throws {
        let server = try FakeNightscout()
        let body = "bad request: api-secret {hash} / {SECRET} \u{1B}[31m" + String(repeating: "y", count: 5000)
        try await server.control(["mode": "error_body", "status": 400, "body": body.replacingOccurrences(of: "{SECRET}", with: "{secret}")])
        let store = await filledStore(1)
        let outcome = await Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings(retryCount: 0, errorBypass: true)),
                                     store: store, logger: .silent, timing: fastTiming()).drain(deadline: deadline(seconds: 20))
        #expect(outcome.quarantined == 1)
        let answer = try #require(await store.answers.values.first)
        let hash = SHA1.hex(FakeNightscout.secret.utf8)
        #expect(!answer.lowercased().contains(hash))
        #expect(!answer.contains(FakeNightscout.secret))
        #expect(answer.contains("(redacted)"))
        #expect(!answer.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F })
        #expect(answer.count <= ServerText.limit + 20)
    }

    /// A 2xx far larger than the request needs (100 MB) is dropped unread with a clear error; nothing
    /// is acknowledged and the readings stay pending.
    @Test func aHugeAnswerIsDroppedAtTheRequestsLimit() async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "huge", "size": 100_000_000])
        let store = await filledStore(3)
        let items = try await store.claimPending(.nightscout, limit: 10)
        let destination = NightscoutDestination(settings: NightscoutSettings(url: server.url, apiSecret: Secret(FakeNightscout.secret)),
                                                http: CurlHTTPClient())
        let outcome = await destination.send(items, networkTimeoutMs: 5000)
        guard case let .transient(failure) = outcome, case let .tooLarge(limit, status)? = failure.error else {
            Issue.record("expected a too-large answer, got \(outcome)")
            return
        }
        #expect(status == 200)
        #expect(limit <= ResponseLimit.maximum)
        #expect(limit < 64 << 10)  // three readings need a few kilobytes, not a megabyte
        #expect(failure.message.contains("longer than \(limit) bytes"))
        try await store.release(items.map(\.id))

        let uploader = Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings(retryCount: 1)), store: store,
                                logger: .silent, timing: fastTiming())
        let drained = await uploader.drain(deadline: deadline(seconds: 30))
        #expect(drained.uploaded == 0)
        #expect(drained.pending == 3)
        #expect(drained.exitStatus(errorBypass: false) == .tempFail)
        #expect(try await uploader.status(now: 0).first?.state.lastErrorMessage?.contains("longer than") == true)
    }

    /// An error status with an oversized body keeps its meaning: a 401 still pauses for credentials.
    @Test func anOversizedErrorBodyKeepsItsStatus() async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "error_body", "status": 401, "body": String(repeating: "x", count: 300_000)])
        let store = await filledStore(2)
        let items = try await store.claimPending(.nightscout, limit: 10)
        let destination = NightscoutDestination(settings: NightscoutSettings(url: server.url, apiSecret: Secret(FakeNightscout.secret)),
                                                http: CurlHTTPClient())
        let outcome = await destination.send(items, networkTimeoutMs: 5000)
        guard case .auth(status: 401, _) = outcome else {
            Issue.record("expected auth 401, got \(outcome)")
            return
        }
    }
}

/// Answers every request with one fixed response.
struct FixedHTTPClient: HTTPClient {
    let response: HTTPResponse
    init(_ response: HTTPResponse) { self.response = response }
    func send(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse { response }
}

@Suite("Daemon service", .serialized, .timeLimit(.minutes(1)))
struct DaemonServiceTests {
    @Test func uploadsNewReadingsWhenToldAndStopsOnCancellation() async throws {
        let server = try FakeNightscout()
        let store = FakeOutboxStore()
        // The uploader's clock never moves: run can end only by its cancellation, not by an idle check.
        let clock = ManualClock()
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings()), store: store,
                                connectivity: ConnectivityHub(), logger: .silent, timing: fastTiming(), clock: clock)
        try await uploader.prepare()
        let service = Task { await uploader.run(idleCheck: .seconds(60)) }
        await store.enqueue(syntheticReading(1), meter: testMeter, builders: [NightscoutBodyBuilder()], createdAt: 1)
        uploader.readingsStored()
        // Wait on the client's own state: the server counts an entry before the client has read its
        // answer and acknowledged it.
        func acknowledged() async -> Int? { try? await uploader.status(now: 1_000_000).first?.counts.acknowledged }
        #expect(await waitUntil(5) { await acknowledged() == 1 })
        for n in 2...11 { await store.enqueue(syntheticReading(n), meter: testMeter, builders: [NightscoutBodyBuilder()], createdAt: Int64(n)) }
        uploader.readingsStored()
        #expect(await waitUntil(5) { await acknowledged() == 11 })
        #expect(try await server.stats()["count"] as? Int == 11)
        let status = try await uploader.status(now: 1_000_000)
        #expect(status.first?.counts.acknowledged == 11)
        #expect(status.first?.counts.pending == 0)
        #expect(status.first?.oldestUnsentAgeSeconds == nil)
        #expect(status.first?.state.state == .ok)
        #expect(status.first?.state.lastSuccessAt != nil)
        service.cancel()
        try await withTimeout(20) { await service.value }
    }

    @Test func statusShowsTheLastErrorAndTheOldestUnsentReading() async throws {
        let server = try FakeNightscout()
        try await server.control(["mode": "status", "status": 503])
        let store = await filledStore(3)
        let uploader = Uploader(settings: nightscoutSettings(server, recovery: RecoverySettings(retryCount: 0)), store: store,
                                logger: .silent, timing: fastTiming())
        _ = await uploader.drain(deadline: deadline(seconds: 10))
        let status = try #require(try await uploader.status(now: 60_000).first)
        #expect(status.state.state == .backoff)
        #expect(status.state.lastErrorCode == 1002)
        #expect(status.state.lastErrorMessage?.contains("HTTP 503") == true)
        #expect(status.counts.pending == 3)
        #expect(status.oldestUnsentAgeSeconds == 60)
    }
}
