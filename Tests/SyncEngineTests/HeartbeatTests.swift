import GatewayCore
import SyncEngine
import Testing
import TestSupport

/// The heartbeat's decision: health and time in, signal and next deadline out, on a manual clock.
@Suite("Heartbeat")
struct HeartbeatTests {
    static let healthy = HeartbeatHealth(bluetoothdReachable: true, adapterPowered: true)
    static let paused = HeartbeatHealth(bluetoothdReachable: true, adapterPowered: true, blockedDestinations: [("nightscout", "paused")])

    @Test("healthy: a ping at start, then one every interval and nothing in between")
    func pingsOnSchedule() {
        let clock = ManualClock()
        var schedule = HeartbeatSchedule(policy: HeartbeatPolicy(interval: .seconds(300)))
        let first = schedule.decide(Self.healthy, at: clock.now)
        #expect(first.send == .ok)
        #expect(first.next == clock.now + .seconds(300))
        clock.advance(by: .seconds(299))
        let early = schedule.decide(Self.healthy, at: clock.now)
        #expect(early.send == nil)
        #expect(early.next == first.next)
        clock.advance(by: .seconds(1))
        let due = schedule.decide(Self.healthy, at: clock.now)
        #expect(due.send == .ok)
        #expect(due.next == clock.now + .seconds(300))
        #expect(!due.changed)
    }

    @Test("a paused destination sends the failure at once with its reason, every interval, and a ping as soon as it is fixed")
    func failsAndRecovers() {
        let clock = ManualClock()
        var schedule = HeartbeatSchedule(policy: HeartbeatPolicy(interval: .seconds(60)))
        _ = schedule.decide(Self.healthy, at: clock.now)
        clock.advance(by: .seconds(10))
        let failing = schedule.decide(Self.paused, at: clock.now)
        #expect(failing.send == .fail(reason: "upload to nightscout paused (credentials refused)"))
        #expect(failing.changed)
        #expect(failing.next == clock.now + .seconds(60))
        clock.advance(by: .seconds(30))
        #expect(schedule.decide(Self.paused, at: clock.now).send == nil)
        clock.advance(by: .seconds(30))
        let again = schedule.decide(Self.paused, at: clock.now)
        #expect(again.send == .fail(reason: "upload to nightscout paused (credentials refused)"))
        #expect(!again.changed)
        clock.advance(by: .seconds(5))
        let fixed = schedule.decide(Self.healthy, at: clock.now)
        #expect(fixed.send == .ok)
        #expect(fixed.changed)
        #expect(fixed.next == clock.now + .seconds(60))
    }

    @Test("silent: no signal and no deadline while unhealthy; a ping when healthy again")
    func silentStopsPinging() {
        let clock = ManualClock()
        var schedule = HeartbeatSchedule(policy: HeartbeatPolicy(interval: .seconds(60), onFail: .silent))
        _ = schedule.decide(Self.healthy, at: clock.now)
        clock.advance(by: .seconds(1))
        let quiet = schedule.decide(Self.paused, at: clock.now)
        #expect(quiet.send == nil)
        #expect(quiet.next == nil)
        #expect(quiet.changed)
        clock.advance(by: .seconds(600))
        #expect(schedule.decide(Self.paused, at: clock.now).send == nil)
        #expect(schedule.decide(Self.healthy, at: clock.now).send == .ok)
    }

    @Test("while healthy the next deadline is the moment the oldest unsent reading grows too old, which then fails")
    func staleReadingDeadline() {
        let clock = ManualClock()
        var schedule = HeartbeatSchedule(policy: HeartbeatPolicy(interval: .seconds(300), maxPending: .seconds(3600)))
        var health = Self.healthy
        health.oldestUnsentAge = .seconds(3500)
        let decision = schedule.decide(health, at: clock.now)
        #expect(decision.send == .ok)
        #expect(decision.next == clock.now + .seconds(100))
        clock.advance(by: .seconds(100))
        health.oldestUnsentAge = .seconds(3600)
        let stale = schedule.decide(health, at: clock.now)
        #expect(stale.send == .fail(reason: "a reading has waited more than 3600 s to be uploaded"))
    }

    @Test("the first problem names the condition: bluetoothd, then the adapter, then destinations")
    func reasons() {
        let max = Duration.seconds(3600)
        #expect(HeartbeatHealth(bluetoothdReachable: false, adapterPowered: false).problem(maxPending: max) == "bluetoothd is not reachable")
        #expect(HeartbeatHealth(bluetoothdReachable: true, adapterPowered: false).problem(maxPending: max) == "no powered Bluetooth adapter")
        #expect(HeartbeatHealth(bluetoothdReachable: true, adapterPowered: true, blockedDestinations: [("fhir", "blocked")])
            .problem(maxPending: max) == "upload to fhir blocked (a reading is refused)")
        var young = Self.healthy
        young.oldestUnsentAge = .seconds(3599)
        #expect(young.problem(maxPending: max) == nil)
    }

    @Test("a new reason is a change and is sent at once")
    func newReasonSentAtOnce() {
        let clock = ManualClock()
        var schedule = HeartbeatSchedule(policy: HeartbeatPolicy(interval: .seconds(300)))
        _ = schedule.decide(Self.paused, at: clock.now)
        clock.advance(by: .seconds(1))
        let other = schedule.decide(HeartbeatHealth(bluetoothdReachable: false, adapterPowered: false), at: clock.now)
        #expect(other.send == .fail(reason: "bluetoothd is not reachable"))
        #expect(other.changed)
    }

    @Test("a meter that needs pairing again fails at once with its address, every interval, and a ping once it is paired")
    func meterNeedingPairingFailsUntilPaired() {
        let clock = ManualClock()
        var schedule = HeartbeatSchedule(policy: HeartbeatPolicy(interval: .seconds(60)))
        #expect(schedule.decide(Self.healthy, at: clock.now).send == .ok)
        clock.advance(by: .seconds(20))
        let lost = HeartbeatHealth(bluetoothdReachable: true, adapterPowered: true, repairNeeded: ["C0:26:DA:01:02:03"])
        let failing = schedule.decide(lost, at: clock.now)
        #expect(failing.send == .fail(reason: "meter C0:26:DA:01:02:03 needs pairing again"))
        #expect(failing.changed)
        #expect(failing.next == clock.now + .seconds(60))
        clock.advance(by: .seconds(59))
        #expect(schedule.decide(lost, at: clock.now).send == nil)
        clock.advance(by: .seconds(1))
        let again = schedule.decide(lost, at: clock.now)
        #expect(again.send == .fail(reason: "meter C0:26:DA:01:02:03 needs pairing again"))
        #expect(!again.changed)
        clock.advance(by: .seconds(7))
        let paired = schedule.decide(Self.healthy, at: clock.now)
        #expect(paired.send == .ok)
        #expect(paired.changed)
        #expect(paired.next == clock.now + .seconds(60))
    }

    @Test("meters that need pairing again are named after bluetoothd and the adapter, before destinations")
    func meterNeedingPairingReason() {
        let max = Duration.seconds(3600)
        let two = HeartbeatHealth(bluetoothdReachable: true, adapterPowered: true, blockedDestinations: [("nightscout", "paused")],
                                  repairNeeded: ["C0:26:DA:01:02:03", "C0:26:DA:0A:0B:0C"])
        #expect(two.problem(maxPending: max) == "meters C0:26:DA:01:02:03, C0:26:DA:0A:0B:0C need pairing again")
        var off = two
        off.adapterPowered = false
        #expect(off.problem(maxPending: max) == "no powered Bluetooth adapter")
        // One more meter losing its bond is a new condition, sent at once.
        let clock = ManualClock()
        var schedule = HeartbeatSchedule(policy: HeartbeatPolicy(interval: .seconds(300)))
        _ = schedule.decide(HeartbeatHealth(bluetoothdReachable: true, adapterPowered: true, repairNeeded: ["C0:26:DA:01:02:03"]), at: clock.now)
        clock.advance(by: .seconds(1))
        var both = two
        both.blockedDestinations = []
        #expect(schedule.decide(both, at: clock.now).send == .fail(reason: "meters C0:26:DA:01:02:03, C0:26:DA:0A:0B:0C need pairing again"))
    }

    @Test("requests by API, and the URL shown as scheme and host only")
    func requests() {
        let hc = HeartbeatTarget(url: "https://hc.example.org/ping/0f2d-secret-uuid/", api: .healthchecks)
        #expect(hc.request(for: .ok).method == "GET")
        #expect(hc.request(for: .ok).url == "https://hc.example.org/ping/0f2d-secret-uuid")
        let fail = hc.request(for: .fail(reason: "bluetoothd is not reachable"))
        #expect(fail.method == "POST")
        #expect(fail.url == "https://hc.example.org/ping/0f2d-secret-uuid/fail")
        #expect(fail.body == Array("bluetoothd is not reachable".utf8))
        #expect(hc.shown == "https://hc.example.org")
        let kuma = HeartbeatTarget(url: "http://kuma.lan:3001/api/push/AbC123", api: .uptimeKuma)
        #expect(kuma.request(for: .ok).url == "http://kuma.lan:3001/api/push/AbC123?status=up&msg=OK")
        #expect(kuma.request(for: .fail(reason: "upload to nightscout paused (credentials refused)")).url
            == "http://kuma.lan:3001/api/push/AbC123?status=down&msg=upload%20to%20nightscout%20paused%20%28credentials%20refused%29")
        #expect(kuma.shown == "http://kuma.lan:3001")
        #expect(HeartbeatTarget(url: "https://user:pw@h.example/x", api: .healthchecks).shown == "https://h.example")
    }

    /// The monitor is shown by the same origin as every other server: the scheme's own port left out,
    /// an IPv4 address dotted, an IPv6 address compressed, never the path that holds the token.
    @Test func monitorShownByItsOrigin() {
        #expect(HeartbeatTarget(url: "https://HC.example.org:443/ping/tok3n", api: .healthchecks).shown == "https://hc.example.org")
        #expect(HeartbeatTarget(url: "http://127.1:3001/api/push/tok3n", api: .uptimeKuma).shown == "http://127.0.0.1:3001")
        #expect(HeartbeatTarget(url: "http://[0:0:0:0:0:0:0:1]:80/tok3n", api: .uptimeKuma).shown == "http://[::1]")
        #expect(HeartbeatTarget(url: "ftp://hc.example/tok3n", api: .healthchecks).shown == "(URL)")
    }
}
