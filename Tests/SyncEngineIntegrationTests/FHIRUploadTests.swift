import Foundation
import GatewayCore
import GlucoseProfile
import Support
import SyncEngine
import Testing
import TestSupport
import Transport

/// `SystemTests/fake_fhir.py`, run with the test virtual environment's Python: it validates every Bundle and
/// Observation with `fhir.resources` and does conditional creates.
final class FakeFHIR: Sendable {
    let child: ChildServer
    let port: Int
    init(token: String? = nil) throws {
        let python = "\(repositoryRoot)/.venv/bin/python"
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw TestFailure("no test virtual environment at \(python): run scripts/install-deps.sh --test")
        }
        child = try ChildServer(python: python, script: "fake_fhir.py", arguments: token.map { ["--token", $0] } ?? [])
        port = child.port("port")
    }
    var base: String { "http://127.0.0.1:\(port)/fhir" }

    func stats() async throws -> [String: Any] {
        let response = try await CurlHTTPClient().send(HTTPRequest(method: "GET", url: "http://127.0.0.1:\(port)/__stats", connectTimeoutMs: 2000, timeoutMs: 10_000))
        return (try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]) ?? [:]
    }

    func control(_ body: [String: Any]) async throws {
        let data = try JSONSerialization.data(withJSONObject: body)
        _ = try await CurlHTTPClient().send(HTTPRequest(method: "POST", url: "http://127.0.0.1:\(port)/__control", body: Array(data), connectTimeoutMs: 2000, timeoutMs: 10_000))
    }
}

@Suite("FHIR upload", .serialized, .timeLimit(.minutes(2)))
struct FHIRUploadTests {
    func settings(_ server: FakeFHIR, token: String? = "fhir-token-123", bypass: Bool = false) -> UploadSettings {
        UploadSettings(recovery: RecoverySettings(retryCount: 2, networkTimeoutMs: 5000, errorBypass: bypass),
                       fhir: FHIRSettings(baseURL: server.base, subject: "Patient/p-1", token: token.map { Secret($0) }))
    }

    @Test func observationsAreValidR4AndConditionalCreateMakesRetriesHarmless() async throws {
        let server = try FakeFHIR(token: "fhir-token-123")
        let builder = FHIRBodyBuilder(subject: "Patient/p-1")
        let store = await filledStore(250, builders: [builder])
        // Half in mmol/L, to check both LOINC codes and units.
        for n in 250..<300 {
            var r = syntheticReading(n)
            r.unit = .molePerLitre
            r.mmoll = 5.5 + Double(n % 10) / 10
            await store.enqueue(r, meter: testMeter, builders: [builder])
        }
        let uploader = Uploader(settings: settings(server), store: store, logger: .silent, timing: fastTiming())
        let outcome = await uploader.drain(deadline: deadline(seconds: 60))
        #expect(outcome.uploaded == 300, "\(outcome.reports)")
        var stats = try await server.stats()
        #expect(stats["invalid"] as? Int == 0, "\(stats["errors"] ?? "")")
        #expect(stats["created"] as? Int == 300)
        #expect(stats["max_in_flight"] as? Int == 1)
        // 300 readings in batches of up to 200.
        #expect(stats["bundles"] as? Int == 2)

        // The same readings again (a retry after an ambiguous failure, or a second gateway): found, not created.
        let again = await filledStore(250, builders: [builder])
        let second = await Uploader(settings: settings(server), store: again, logger: .silent, timing: fastTiming()).drain(deadline: deadline(seconds: 60))
        #expect(second.uploaded == 250)
        #expect(second.reports.first?.duplicates == 250)
        stats = try await server.stats()
        #expect(stats["count"] as? Int == 300)
        #expect(stats["found"] as? Int == 250)
    }

    @Test func aRefusedEntryIsQuarantinedWithItsOutcome() async throws {
        let server = try FakeFHIR(token: "fhir-token-123")
        let store = await filledStore(20, builders: [FHIRBodyBuilder(subject: "Patient/p-1")])
        let poison = try #require(await store.rows.first { $0.readingID == 5 })
        try await server.control(["poison": ["urn:uuid:\(poison.key)"]])
        let outcome = await Uploader(settings: settings(server, bypass: true), store: store, logger: .silent, timing: fastTiming())
            .drain(deadline: deadline(seconds: 30))
        #expect(outcome.uploaded == 19)
        #expect(outcome.quarantined == 1)
        #expect(await store.answers[poison.id]?.contains("422") == true)
    }

    @Test func theValidatorRefusesAMalformedObservation() async throws {
        // Negative control: the outside validator does look at what we send.
        let server = try FakeFHIR()
        let good = try #require(FHIRBodyBuilder(subject: "Patient/p-1").element(for: syntheticReading(1), meter: testMeter))
        let text = String(decoding: good.body, as: UTF8.self).replacingOccurrences(of: "T08:05:00.000+01:00", with: " 08:05")
        #expect(text != String(decoding: good.body, as: UTF8.self))
        let item = OutboxItem(id: 1, destination: .fhir, readingID: 1, key: good.key, body: Array(text.utf8), state: .inFlight, attempts: 0, createdAt: 0)
        let destination = FHIRDestination(settings: FHIRSettings(baseURL: server.base, subject: "Patient/p-1"), http: CurlHTTPClient())
        let outcome = await destination.send([item], networkTimeoutMs: 5000)
        // The Bundle itself fails validation (its entries are validated with it): 400 for the request.
        guard case let .rejected(status, answer) = outcome else {
            Issue.record("unexpected \(outcome)")
            return
        }
        #expect(status == 400)
        #expect(answer.contains("effectiveDateTime"))
        #expect(try await server.stats()["invalid"] as? Int == 1)
    }

    @Test func serverErrorIsRetriedAndWrongTokenPauses() async throws {
        let server = try FakeFHIR(token: "fhir-token-123")
        try await server.control(["status": 503, "times": 2])
        let store = await filledStore(30, builders: [FHIRBodyBuilder(subject: "Patient/p-1")])
        let ok = await Uploader(settings: settings(server), store: store, logger: .silent, timing: fastTiming()).drain(deadline: deadline(seconds: 30))
        #expect(ok.uploaded == 30)

        let other = await filledStore(3, builders: [FHIRBodyBuilder(subject: "Patient/p-1")])
        let wrong = Uploader(settings: settings(server, token: "wrong-token-456"), store: other, logger: .silent, timing: fastTiming())
        let paused = await wrong.drain(deadline: deadline(seconds: 30))
        #expect(paused.reports.first?.end == .paused(code: 401, message: "credentials refused by http://127.0.0.1:\(server.port) (HTTP 401); uploads paused until they are fixed"))
        #expect(await wrong.checkCredentials().first?.1 == .refused("server answered HTTP 401"))
    }

    /// A batch-response whose entries carry no usable `response.status` (or are not objects) confirms
    /// nothing: the readings stay pending, are sent again like after a 5xx, then back off (exit 75);
    /// they are neither acknowledged nor treated as refused.
    @Test(arguments: ["no_status", "not_objects"])
    func entriesWithoutA2xxStatusAreNotAcknowledged(_ answer: String) async throws {
        let server = try FakeFHIR(token: "fhir-token-123")
        try await server.control(["answer": answer, "times": 100])
        let store = await filledStore(4, builders: [FHIRBodyBuilder(subject: "Patient/p-1")])
        let uploader = Uploader(settings: settings(server), store: store, logger: .silent, timing: fastTiming())
        let outcome = await uploader.drain(deadline: deadline(seconds: 30))
        #expect(outcome.uploaded == 0)
        let counts = try await store.counts(.fhir)
        #expect(counts.pending == 4)
        #expect(counts.quarantined == 0)
        #expect(outcome.exitStatus(errorBypass: false) == .tempFail)
        guard case .deferred(code: NetworkErrorCode.timeout, _)? = outcome.reports.first?.end else {
            Issue.record("expected deferred 1002, got \(String(describing: outcome.reports.first?.end))")
            return
        }
        #expect(outcome.reports.first?.requests == 3)  // retry_count 2: retried like a 5xx
        #expect(try await uploader.status(now: 0).first?.state.state == .backoff)
    }

    @Test func anyTwoHundredStatusCountsAsStored() async throws {
        let server = try FakeFHIR(token: "fhir-token-123")
        try await server.control(["answer": "accepted", "times": 100])
        let store = await filledStore(5, builders: [FHIRBodyBuilder(subject: "Patient/p-1")])
        let outcome = await Uploader(settings: settings(server), store: store, logger: .silent, timing: fastTiming())
            .drain(deadline: deadline(seconds: 30))
        #expect(outcome.uploaded == 5)
        #expect(!outcome.deferred)
        #expect(outcome.reports.first?.requests == 1)  // stored on the first answer, not re-sent
    }

    /// Diagnostics that reflect our bearer token are redacted and cut short before they are stored.
    @Test func aReflectedTokenInDiagnosticsIsRedactedAndBounded() async throws {
        let server = try FakeFHIR(token: "fhir-token-123")
        try await server.control(["answer": "reflect"])
        let store = await filledStore(1, builders: [FHIRBodyBuilder(subject: "Patient/p-1")])
        let outcome = await Uploader(settings: settings(server, bypass: true), store: store, logger: .silent, timing: fastTiming())
            .drain(deadline: deadline(seconds: 30))
        #expect(outcome.quarantined == 1)
        let answer = try #require(await store.answers.values.first)
        #expect(answer.contains("422"))
        #expect(answer.contains("(redacted)"))
        #expect(!answer.contains("fhir-token-123"))
        #expect(answer.count < 2 * ServerText.limit + 60)
    }
}
