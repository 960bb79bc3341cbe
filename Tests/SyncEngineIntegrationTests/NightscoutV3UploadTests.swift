import Foundation
import GatewayCore
import Support
import SyncEngine
import Synchronization
import Testing
import TestSupport
import Transport

/// Against the loopback Nightscout double over real HTTP.
@Suite("Nightscout API v3 upload", .serialized, .timeLimit(.minutes(2)))
struct NightscoutV3UploadTests {
    static let full = "gateway-full-0123456789"
    static let careOnly = "care-0123456789abcdef"

    func server() throws -> FakeNightscout {
        try FakeNightscout(extra: ["--access-token", "\(Self.full)=api:entries:create,api:entries:update,api:treatments:create",
                                   "--access-token", "\(Self.careOnly)=api:treatments:create"])
    }

    func settings(_ server: FakeNightscout, token: String) -> UploadSettings {
        var ns = NightscoutSettings(url: server.url, token: Secret(token))
        ns.api = .v3
        return UploadSettings(recovery: RecoverySettings(retryCount: 5, networkTimeoutMs: 2000), nightscout: ns)
    }

    @Test func everyReadingArrivesOnceThroughCommitThenDropAnd500() async throws {
        let server = try server()
        let store = await filledStore(60)
        try await server.control(["mode": "commit_drop", "times": 2, "after": 5])
        let uploader = Uploader(settings: settings(server, token: Self.full), store: store, logger: .silent, timing: fastTiming())
        try await uploader.prepare()
        var outcome = await uploader.drain(deadline: deadline(seconds: 60))
        #expect(outcome.uploaded == 60)
        try await server.control(["mode": "status", "status": 500, "times": 3])
        let more = await filledStoreAppending(store, from: 60, count: 20)
        #expect(more == 20)
        outcome = await uploader.drain(deadline: deadline(seconds: 60))
        #expect(outcome.uploaded == 20)
        #expect(!outcome.deferred)
        let v3 = try await server.v3()
        let entries = v3["entries"] as? [[String: Any]] ?? []
        #expect(entries.count == 80)
        #expect(Set(entries.compactMap { $0["identifier"] as? String }).count == 80)
        #expect(entries.allSatisfy { $0["app"] as? String == "glucose-gateway" && $0["utcOffset"] as? Int == 60 })
        #expect(try await store.counts(.nightscout).acknowledged == 80)
        #expect(v3["exchanges"] as? Int == 1)
        let faults = try await server.stats()["faults"] as? [String: Int]
        #expect(faults == ["commit_drop": 2, "status": 3])
    }

    @Test func entriesAndTreatmentsArriveOnceThroughFaultsWithOneJWT() async throws {
        let server = try server()
        var ns = NightscoutSettings(url: server.url, token: Secret(Self.full), treatments: true)
        ns.api = .v3
        let settings = UploadSettings(recovery: RecoverySettings(retryCount: 5, networkTimeoutMs: 2000), nightscout: ns)
        let store = await filledStore(30, builders: settings.bodyBuilders)
        try await server.control(["mode": "commit_drop", "times": 2, "after": 7])
        let uploader = Uploader(settings: settings, store: store, logger: .silent, timing: fastTiming())
        #expect(uploader.dispatchers.map(\.name) == [.nightscout, .nightscoutTreatments])
        try await uploader.prepare()
        let outcome = await uploader.drain(deadline: deadline(seconds: 60))
        #expect(outcome.uploaded == 60)
        #expect(!outcome.deferred)
        let v3 = try await server.v3()
        let treatments = v3["treatments"] as? [[String: Any]] ?? []
        #expect(treatments.count == 30)
        #expect(Set(treatments.compactMap { $0["identifier"] as? String }).count == 30)
        #expect(treatments.allSatisfy { $0["eventType"] as? String == "BG Check" && $0["utcOffset"] as? Int == 60 })
        // created_at as the server keeps it (UTC) is the reading's instant.
        let first = try #require(treatments.first { $0["identifier"] as? String == syntheticKey(0) })
        #expect(first["created_at"] as? String == "2026-01-01T07:00:00.000Z")
        #expect((v3["entries"] as? [[String: Any]])?.count == 30)
        #expect(v3["exchanges"] as? Int == 1)  // one JWT for both collections
        #expect(try await store.counts(.nightscoutTreatments).acknowledged == 30)
    }

    @Test func aTokenWithoutPermissionIsRefusedWithThePermissionNamed() async throws {
        let server = try server()
        let store = await filledStore(5)
        let uploader = Uploader(settings: settings(server, token: Self.careOnly), store: store, logger: .silent, timing: fastTiming())
        let checks = await uploader.checkCredentials()
        #expect(checks.map(\.1) == [.refused("access token lacks permission api:entries:create")])
        try await uploader.prepare()
        let outcome = await uploader.drain(deadline: deadline(seconds: 30))
        #expect(outcome.uploaded == 0)
        guard case .paused(403, _) = outcome.reports.first?.end else {
            Issue.record("expected paused, got \(String(describing: outcome.reports.first?.end))")
            return
        }
        #expect(try await store.counts(.nightscout).pending == 5)
    }
}

/// The seam for treatments: the same destination type posts a collection's frozen documents to /api/v3/<collection>.
@Suite("Nightscout API v3 treatments", .serialized, .timeLimit(.minutes(2)))
struct NightscoutV3TreatmentsTests {
    @Test func aTreatmentsDestinationPostsToItsCollectionAndChecksItsPermission() async throws {
        let server = try FakeNightscout(extra: ["--access-token", "\(NightscoutV3UploadTests.careOnly)=api:treatments:create",
                                                "--access-token", "reader-0123456789abcdef=*:*:read"])
        var ns = NightscoutSettings(url: server.url, token: Secret(NightscoutV3UploadTests.careOnly))
        ns.api = .v3
        let name = DestinationName(rawValue: "nightscout-treatments")
        let destination = try #require(NightscoutV3Destination(name: name, collection: "treatments", settings: ns, http: CurlHTTPClient()))
        #expect(await destination.checkCredentials(timeoutMs: 5000) == .accepted)
        let body = Array(#"{"eventType":"BG Check","glucose":112,"glucoseType":"Finger","units":"mg/dl","created_at":"2026-01-01T08:02:10.000+01:00","enteredBy":"glucose-gateway","identifier":"a9fd2d19-9b4c-5247-8c31-474e432d8da5"}"#.utf8)
        let item = OutboxItem(id: 7, destination: name, readingID: 1, key: "a9fd2d19-9b4c-5247-8c31-474e432d8da5", body: body,
                              state: .inFlight, attempts: 0, createdAt: 0)
        #expect(await destination.send([item], networkTimeoutMs: 2000) == .perElement(stored: [7], duplicates: 0, rejected: [:], retry: [], retryReason: ""))
        #expect(await destination.send([item], networkTimeoutMs: 2000) == .perElement(stored: [7], duplicates: 1, rejected: [:], retry: [], retryReason: ""))
        let treatments = try await server.v3()["treatments"] as? [[String: Any]] ?? []
        #expect(treatments.count == 1)
        #expect(treatments.first?["date"] as? Int == 1_767_250_930_000)
        #expect(treatments.first?["utcOffset"] as? Int == 60)

        var reader = ns
        reader.token = Secret("reader-0123456789abcdef")
        let readOnly = try #require(NightscoutV3Destination(name: name, collection: "treatments", settings: reader, http: CurlHTTPClient()))
        #expect(await readOnly.checkCredentials(timeoutMs: 5000) == .refused("access token lacks permission api:treatments:create"))
    }
}

extension FakeNightscout {
    func v3() async throws -> [String: Any] {
        let request = HTTPRequest(method: "GET", url: "http://127.0.0.1:\(controlPort)/__v3", connectTimeoutMs: 2000, timeoutMs: 10_000)
        let response = try await CurlHTTPClient().send(request)
        return (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]) ?? [:]
    }
}

/// The outbox key of synthetic reading `n`.
func syntheticKey(_ n: Int) -> String {
    let reading = syntheticReading(n)
    return IdempotencyKey.key(meterAddress: reading.meterAddress, sequence: reading.sequence, meterTime: reading.userFacingTime.isoString)
}

/// Readings `from..<from+count` of the synthetic meter added to `store`; returns how many were queued.
func filledStoreAppending(_ store: FakeOutboxStore, from: Int, count: Int) async -> Int {
    for n in from..<(from + count) {
        await store.enqueue(syntheticReading(n), meter: testMeter, builders: [NightscoutBodyBuilder()], createdAt: Int64(n))
    }
    return count
}
