import GatewayCore
import Support
import SyncEngine
import Synchronization
import Testing
import TestSupport
import Transport

/// Records each request and answers with the status it is told (or fails with `error`).
final class RecordingHTTPClient: HTTPClient {
    struct Sent: Sendable, Equatable {
        var method: String
        var url: String
        var body: String
        var timeoutMs: Int
    }
    private let state = Mutex<(sent: [Sent], status: Int, error: HTTPError?)>(([], 200, nil))
    var sent: [Sent] { state.withLock { $0.sent } }
    func answer(status: Int = 200, error: HTTPError? = nil) { state.withLock { $0.status = status; $0.error = error } }
    func send(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
        let (status, error) = state.withLock { s in
            s.sent.append(Sent(method: request.method, url: request.url, body: String(decoding: request.body, as: UTF8.self),
                               timeoutMs: request.timeoutMs))
            return (s.status, s.error)
        }
        if let error { throw error }
        return HTTPResponse(status: status, body: Array("OK".utf8))
    }
}

/// The heartbeat's driver on a manual clock: when it sends, what, and what it logs and reports.
@Suite struct HeartbeatPingerTests {
    static let url = "http://127.0.0.1:9/ping/tok-4411"
    static let healthy = HeartbeatHealth(bluetoothdReachable: true, adapterPowered: true)
    static let paused = HeartbeatHealth(bluetoothdReachable: true, adapterPowered: true, blockedDestinations: [("nightscout", "paused")])

    struct Fixture {
        let clock = ManualClock()
        let http = RecordingHTTPClient()
        let log = MemoryLogSink()
        let reports = Reports()
        let pinger: HeartbeatPinger

        final class Reports: Sendable {
            private let list = Mutex<[HeartbeatReport]>([])
            func withLock<T>(_ body: (inout [HeartbeatReport]) -> T) -> T { list.withLock { body(&$0) } }
        }

        init(onFail: HeartbeatFailMode = .report) {
            let reports = self.reports
            pinger = HeartbeatPinger(target: HeartbeatTarget(url: HeartbeatPingerTests.url, api: .healthchecks),
                                     policy: HeartbeatPolicy(interval: .seconds(300), onFail: onFail), http: http, networkTimeoutMs: 1500,
                                     clock: clock, now: { 1_000_000 }, logger: Logger(label: "gateway", minimumLevel: .debug, sink: log),
                                     report: { r in reports.withLock { $0.append(r) } })
        }

        /// Waits (without time passing) until `n` reports came in.
        func reported(_ n: Int) async -> [HeartbeatReport] {
            _ = await waitUntil(10) { reports.withLock { $0.count } >= n }
            return reports.withLock { $0 }
        }

        func timerSet() async {
            _ = await waitUntil(10) { clock.sleeping > 0 }
        }
    }

    @Test func pingsAtStartThenEveryIntervalWithTheNetworkTimeout() async {
        let f = Fixture()
        await f.pinger.update(Self.healthy, observedAt: 1_000_000)
        _ = await f.reported(1)
        #expect(f.http.sent == [.init(method: "GET", url: Self.url, body: "", timeoutMs: 1500)])
        await f.timerSet()
        f.clock.advance(by: .seconds(299))
        for _ in 0..<100 { await Task.yield() }
        #expect(f.http.sent.count == 1)
        f.clock.advance(by: .seconds(1))
        let reports = await f.reported(2)
        #expect(f.http.sent.count == 2)
        #expect(reports.last == HeartbeatReport(at: 1_000_000, signal: "ok", reason: nil, delivered: true, error: nil))
        await f.pinger.stop()
    }

    @Test func blockedDestinationSendsFailWithTheReasonThenPingsWhenFixed() async {
        let f = Fixture()
        await f.pinger.update(Self.healthy, observedAt: 1_000_000)
        _ = await f.reported(1)
        await f.pinger.update(Self.paused, observedAt: 1_000_000)
        let failed = await f.reported(2)
        #expect(f.http.sent.last == .init(method: "POST", url: Self.url + "/fail", body: "upload to nightscout paused (credentials refused)", timeoutMs: 1500))
        #expect(failed.last?.signal == "fail")
        #expect(failed.last?.reason == "upload to nightscout paused (credentials refused)")
        await f.pinger.update(Self.healthy, observedAt: 1_000_000)
        _ = await f.reported(3)
        #expect(f.http.sent.last?.url == Self.url)
        #expect(f.log.entries.contains { $0.contains("unhealthy (upload to nightscout paused (credentials refused)); reporting the failure to http://127.0.0.1:9") })
        #expect(!f.log.entries.joined().contains("tok-4411"))
        await f.pinger.stop()
    }

    @Test func aFailingMonitorIsLoggedOncePerChange() async {
        let f = Fixture()
        f.http.answer(error: .connectionRefused)
        await f.pinger.update(Self.healthy, observedAt: 1_000_000)
        _ = await f.reported(1)
        await f.timerSet()
        f.clock.advance(by: .seconds(300))
        let reports = await f.reported(2)
        #expect(reports.map(\.error) == ["connection refused", "connection refused"])
        #expect(f.log.entries.filter { $0.contains("not reached") } == ["warning gateway: heartbeat: http://127.0.0.1:9 not reached: connection refused; trying again at the next ping"])
        f.http.answer(status: 404)
        await f.timerSet()
        f.clock.advance(by: .seconds(300))
        _ = await f.reported(3)
        f.http.answer(status: 200)
        await f.timerSet()
        f.clock.advance(by: .seconds(300))
        _ = await f.reported(4)
        #expect(f.log.entries.filter { $0.contains("not reached") || $0.contains("reached again") }.count == 3)
        #expect(f.log.entries.last?.hasSuffix("heartbeat: http://127.0.0.1:9 reached again") == true)
        await f.pinger.stop()
    }

    @Test func silentSendsNothingWhileUnhealthyAndNoTimerRuns() async {
        let f = Fixture(onFail: .silent)
        await f.pinger.update(Self.healthy, observedAt: 1_000_000)
        _ = await f.reported(1)
        await f.pinger.update(Self.paused, observedAt: 1_000_000)
        let reports = await f.reported(2)
        #expect(reports.last?.signal == "silent")
        #expect(await waitUntil(10) { f.clock.sleeping == 0 })
        #expect(f.http.sent.count == 1)
        await f.pinger.stop()
    }

    @Test func noHealthStopsTheTimer() async {
        let f = Fixture()
        await f.pinger.update(Self.healthy, observedAt: 1_000_000)
        _ = await f.reported(1)
        await f.timerSet()
        await f.pinger.update(nil, observedAt: 1_000_000)
        _ = await waitUntil(10) { f.clock.sleeping == 0 }
        #expect(f.clock.sleeping == 0)
        f.clock.advance(by: .seconds(3000))
        for _ in 0..<100 { await Task.yield() }
        #expect(f.http.sent.count == 1)
    }

    /// Answers only when released: a monitor that hangs (within the network timeout).
    final class HangingHTTPClient: HTTPClient {
        private let state = Mutex<(sent: [String], waiters: [CheckedContinuation<Void, Never>], open: Bool)>(([], [], false))
        var sent: [String] { state.withLock { $0.sent } }
        func release() {
            let waiters = state.withLock { s in
                s.open = true
                defer { s.waiters = [] }
                return s.waiters
            }
            for w in waiters { w.resume() }
        }
        func send(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let go = state.withLock { s in
                    s.sent.append(request.url)
                    if !s.open { s.waiters.append(c) }
                    return s.open
                }
                if go { c.resume() }
            }
            return HTTPResponse(status: 200)
        }
    }

    @Test func aHangingMonitorBlocksNothingAndTheLatestSignalGoesOutAfterIt() async {
        let clock = ManualClock()
        let http = HangingHTTPClient()
        let reports = Fixture.Reports()
        let pinger = HeartbeatPinger(target: HeartbeatTarget(url: Self.url, api: .healthchecks), policy: HeartbeatPolicy(interval: .seconds(300)),
                                     http: http, networkTimeoutMs: 1500, clock: clock, now: { 1_000_000 }, logger: .silent,
                                     report: { r in reports.withLock { $0.append(r) } })
        await pinger.update(Self.healthy, observedAt: 1_000_000)
        // The ping hangs; further news is taken at once, and the failure waits for the ping to end.
        await pinger.update(Self.paused, observedAt: 1_000_000)
        await pinger.update(HeartbeatHealth(bluetoothdReachable: false, adapterPowered: true), observedAt: 1_000_000)
        _ = await waitUntil(10) { !http.sent.isEmpty }
        #expect(http.sent == [Self.url])
        http.release()
        _ = await waitUntil(10) { reports.withLock { $0.count } >= 2 }
        #expect(http.sent == [Self.url, Self.url + "/fail"])
        #expect(reports.withLock { $0.map(\.reason) } == [nil, "bluetoothd is not reachable"])
        await pinger.stop()
    }
}
