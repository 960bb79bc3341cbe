import Foundation
import GatewayCore
import GlucoseProfile
import Support
import SyncEngine
import Testing
import TestSupport
import Transport

/// BG Check treatments to the loopback Nightscout double, beside the entries.
@Suite("Nightscout treatments upload", .serialized, .timeLimit(.minutes(2)))
struct TreatmentUploadTests {
    static let builders: [any OutboxBodyBuilder] = [NightscoutBodyBuilder(), NightscoutTreatmentBuilder()]

    func settings(_ server: FakeNightscout, recovery: RecoverySettings = RecoverySettings()) -> UploadSettings {
        UploadSettings(recovery: recovery, nightscout: NightscoutSettings(url: server.url, apiSecret: Secret(FakeNightscout.secret),
                                                                          treatments: true))
    }

    func treatments(_ server: FakeNightscout) async throws -> [[String: Any]] {
        try await server.treatmentDocuments()
    }

    /// Every reading exactly once as an entry and as a BG Check at its own instant.
    func expectExactlyOnce(_ server: FakeNightscout, count: Int) async throws {
        let entries = try await server.entries()
        #expect(entries.count == count)
        let docs = try await treatments(server)
        #expect(docs.count == count)
        let expected = Set((0..<count).map { n -> String in
            let instant = syntheticReading(n).instant ?? 0
            // As the server stores it: UTC with milliseconds (the synthetic readings have none).
            return String(CivilCalendar.isoUTC(millis: instant).dropLast()) + ".000Z"
        })
        #expect(Set(docs.compactMap { $0["created_at"] as? String }) == expected)
        #expect(Set(docs.compactMap { $0["identifier"] as? String }).count == count)
        #expect(docs.allSatisfy { $0["eventType"] as? String == "BG Check" && $0["glucoseType"] as? String == "Finger" })
        #expect(docs.allSatisfy { $0["utcOffset"] as? Int == 60 })
    }

    @Test func bothDestinationsDrainExactlyOnce() async throws {
        let server = try FakeNightscout()
        let store = await filledStore(30, builders: Self.builders)
        let uploader = Uploader(settings: settings(server), store: store, logger: .silent, timing: fastTiming())
        try await uploader.prepare()
        let outcome = await uploader.drain(deadline: deadline(seconds: 30))
        #expect(outcome.uploaded == 60)
        #expect(!outcome.deferred)
        #expect(outcome.reports.map(\.destination) == [.nightscout, .nightscoutTreatments])
        try await expectExactlyOnce(server, count: 30)
    }

    @Test(arguments: [
        ["mode": "status", "status": 500, "times": 2, "collection": "treatments"] as [String: any Sendable],
        ["mode": "commit_drop", "times": 2, "collection": "treatments"],
        ["mode": "commit_drop", "times": 2, "collection": "all"],
        ["mode": "answer", "answer": "fewer", "times": 1, "collection": "treatments"],
    ])
    func faultsNeverMakeASecondTreatment(_ fault: [String: any Sendable]) async throws {
        let server = try FakeNightscout()
        try await server.control(fault)
        let store = await filledStore(20, builders: Self.builders)
        let uploader = Uploader(settings: settings(server, recovery: RecoverySettings(retryCount: 5, networkTimeoutMs: 1000)),
                                store: store, logger: .silent, timing: fastTiming())
        try await uploader.prepare()
        let outcome = await uploader.drain(deadline: deadline(seconds: 40))
        #expect(outcome.pending == 0)
        #expect(!outcome.deferred)
        try await expectExactlyOnce(server, count: 20)
        let stats = try await server.stats()
        // The faults were real: injected, and (except the 500s, refused before reading) treatments seen twice.
        let mode = fault["mode"] as? String ?? ""
        #expect(((stats["faults"] as? [String: Any])?[mode] as? Int ?? 0) >= 1)
        if mode != "status" { #expect((stats["treatments_received"] as? Int ?? 0) > 20) }
        #expect(try await store.counts(.nightscoutTreatments).acknowledged == 20)
    }

    @Test func careportalOffPausesTreatmentsOnlyThenResumes() async throws {
        let server = try FakeNightscout(extra: ["--no-careportal"])
        let store = await filledStore(10, builders: Self.builders)
        let http = CountingHTTPClient()
        let uploader = Uploader(settings: settings(server), store: store, http: http, logger: .silent, timing: fastTiming())
        try await uploader.prepare()
        // Paused at start-up, before anything is sent.
        let state = try #require(try await store.destinationState(.nightscoutTreatments))
        #expect(state.state == .paused)
        #expect(state.lastErrorMessage?.contains("careportal is not enabled") == true)
        #expect(http.count("/api/v1/treatments") == 0)

        let outcome = await uploader.drain(deadline: deadline(seconds: 20))
        let byName = Dictionary(uniqueKeysWithValues: outcome.reports.map { ($0.destination, $0) })
        #expect(byName[.nightscout]?.end == .drained)
        #expect(byName[.nightscout]?.uploaded == 10)
        guard case .paused(let code, let message)? = byName[.nightscoutTreatments]?.end else {
            Issue.record("expected treatments paused, got \(String(describing: byName[.nightscoutTreatments]?.end))")
            return
        }
        #expect(code == 404)
        #expect(message.contains("careportal"))
        #expect(http.count("/api/v1/treatments") == 0)
        #expect(try await store.counts(.nightscoutTreatments).pending == 10)
        #expect(try await server.entries().count == 10)

        // The site turns careportal on: the next session checks again and sends the queue.
        try await server.control(["careportal": true])
        let again = await uploader.drain(deadline: deadline(seconds: 20))
        #expect(!again.deferred)
        try await expectExactlyOnce(server, count: 10)
    }

    @Test func checkSaysCareportalIsOff() async throws {
        let server = try FakeNightscout(extra: ["--no-careportal"])
        let uploader = Uploader(settings: settings(server), store: FakeOutboxStore(), logger: .silent, timing: fastTiming())
        let verdicts = Dictionary(uniqueKeysWithValues: await uploader.checkCredentials())
        #expect(verdicts[.nightscout] == .accepted)
        guard case .disabled(let why)? = verdicts[.nightscoutTreatments] else {
            Issue.record("expected disabled, got \(String(describing: verdicts[.nightscoutTreatments]))")
            return
        }
        #expect(why.contains("careportal is not enabled"))
        try await server.control(["careportal": true])
        #expect(Dictionary(uniqueKeysWithValues: await uploader.checkCredentials())[.nightscoutTreatments] == .accepted)
    }

    @Test func aTreatmentsRouteThatDisappearsPausesThatDestination() async throws {
        // Careportal switched off while the gateway runs: the route answers 404; entries go on.
        let server = try FakeNightscout()
        let store = await filledStore(5, builders: Self.builders)
        let uploader = Uploader(settings: settings(server), store: store, logger: .silent, timing: fastTiming())
        try await uploader.prepare()
        try await server.control(["careportal": false])
        let outcome = await uploader.drain(deadline: deadline(seconds: 20))
        let byName = Dictionary(uniqueKeysWithValues: outcome.reports.map { ($0.destination, $0) })
        #expect(byName[.nightscout]?.end == .drained)
        guard case .paused(404, _)? = byName[.nightscoutTreatments]?.end else {
            Issue.record("expected paused 404, got \(String(describing: byName[.nightscoutTreatments]?.end))")
            return
        }
        #expect(try await server.treatmentDocuments().isEmpty)
    }
}

extension FakeNightscout {
    func treatmentDocuments() async throws -> [[String: Any]] {
        let request = HTTPRequest(method: "GET", url: "http://127.0.0.1:\(controlPort)/__treatments", connectTimeoutMs: 2000, timeoutMs: 10_000)
        let response = try await CurlHTTPClient().send(request)
        guard response.status == 200 else { throw TestFailure("control /__treatments answered \(response.status)") }
        return (try JSONSerialization.jsonObject(with: Data(response.body)) as? [[String: Any]]) ?? []
    }
}
