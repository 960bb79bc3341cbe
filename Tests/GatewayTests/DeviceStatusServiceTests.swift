import GatewayCore
import Support
import SyncEngine
import Synchronization
import Testing
import TestSupport
import Transport
@testable import Gateway

/// The device status service reads the meters from the store only when a document is built, not at every
/// daemon snapshot: an idle daemon does no repeated store reads.
@Suite struct DeviceStatusServiceTests {
    /// Counts the documents sent and answers each with 200.
    final class CountingHTTPClient: HTTPClient {
        private let bodies = Mutex<[String]>([])
        var sent: [String] { bodies.withLock { $0 } }
        func send(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
            bodies.withLock { $0.append(String(decoding: request.body, as: UTF8.self)) }
            return HTTPResponse(status: 200, body: Array("OK".utf8))
        }
    }

    final class Count: Sendable {
        private let count = Mutex(0)
        func add() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }

    @Test func snapshotsWithinOneIntervalReadTheStoreOncePerDocument() async throws {
        let feed = SnapshotFeed()
        let clock = ManualClock()
        let http = CountingHTTPClient()
        let reads = Count()
        var nightscout = NightscoutSettings(url: "http://127.0.0.1:9/ns", apiSecret: Secret("correct-horse-battery"))
        nightscout.deviceStatus = DeviceStatusPolicy(interval: .seconds(900))
        var meter = MeterInfo(address: "C0:26:DA:01:02:03", timeZone: "Europe/Berlin")
        meter.name = "Meter A"
        let readMeters: MeterStateReader = { [meter] _ in
            reads.add()
            return [MeterState(info: meter, newestFirst: [])]
        }
        let made = DeviceStatusService(feed: feed, config: GatewayConfig(), settings: UploadSettings(nightscout: nightscout),
                                       http: http, clock: clock, logger: Logger(label: "t", sink: MemoryLogSink()),
                                       readMeters: readMeters)
        let service = try #require(made)
        let running = Task { await service.run() }

        var snapshot = DaemonSnapshot()
        snapshot.phase = .running
        feed.publish(snapshot)
        #expect(await waitUntil(30) { http.sent.count == 1 })
        #expect(http.sent.first?.contains("Meter A") == true)
        // Fifty snapshots within the interval (the daemon publishes one at every change of its state)...
        for second in 1...50 {
            snapshot.updatedAt = Int64(second) * 1000
            feed.publish(snapshot)
        }
        // ...and then a download that ended: its snapshot is the newest, so the service sees it, and the
        // document it brings is due a minimum spacing after the first.
        snapshot.counters.downloads = 1
        feed.publish(snapshot)
        #expect(await waitUntil(30) { clock.deadlines == [clock.now + DeviceStatusPolicy.minimumSpacing] })
        #expect(reads.value == 1)
        clock.advance(by: DeviceStatusPolicy.minimumSpacing)
        #expect(await waitUntil(30) { http.sent.count == 2 })
        #expect(reads.value == 2)

        feed.finish()
        await running.value
    }
}
