import GatewayCore
import Testing
@testable import Gateway

/// A service that notes when it starts and when it has stopped, and runs until cancelled.
private struct NotingService: Service {
    let name: String
    let log: StatusLog

    func run() async {
        log.append("start \(name)")
        while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
        log.append("stop \(name)")
    }
}

@Suite("Service group and snapshot feed", .timeLimit(.minutes(1)))
struct ServiceGroupTests {
    @Test("the services run beside the body and stop after it, in the reverse order of their start")
    func stopsInReverseOrder() async {
        let log = StatusLog()
        let group = ServiceGroup(["a", "b", "c"].map { NotingService(name: $0, log: log) })
        let result = await group.run { () async -> Int in
            // Every service is running before the body goes on.
            while log.all.count < 3 { await Task.yield() }
            log.append("body")
            return 7
        }
        #expect(result == 7)
        let lines = log.all
        #expect(Set(lines.prefix(3)) == ["start a", "start b", "start c"])
        #expect(Array(lines.dropFirst(3)) == ["body", "stop c", "stop b", "stop a"])
    }

    @Test("a group without services runs its body")
    func empty() async {
        #expect(await ServiceGroup([]).run { "done" } == "done")
    }

    @Test("each reader gets every snapshot in order and ends after the last once the feed finishes")
    func everyReader() async {
        let feed = SnapshotFeed()
        let first = feed.reader(.every)
        let second = feed.reader(.every)
        for pid in Int32(1)...3 {
            var s = DaemonSnapshot()
            s.pid = pid
            feed.publish(s)
        }
        feed.finish()
        var seen: [Int32] = []
        for await s in first { seen.append(s.pid) }
        #expect(seen == [1, 2, 3])
        seen = []
        for await s in second { seen.append(s.pid) }
        #expect(seen == [1, 2, 3])
        // A reader taken after the end is empty rather than waiting for ever.
        var late = 0
        for await _ in feed.reader(.every) { late += 1 }
        #expect(late == 0)
    }

    @Test("a reader of the newest snapshot that falls behind gets only the newest")
    func latestReader() async {
        let feed = SnapshotFeed()
        let reader = feed.reader(.latest)
        for pid in Int32(1)...5 {
            var s = DaemonSnapshot()
            s.pid = pid
            feed.publish(s)
        }
        feed.finish()
        var seen: [Int32] = []
        for await s in reader { seen.append(s.pid) }
        #expect(seen == [5])
    }

    @Test("the service manager hears READY once with the first status, STATUS after, STOPPING once")
    func serviceManagerNotes() {
        var notes = ServiceManagerNotes()
        var s = DaemonSnapshot()
        #expect(notes.notes(for: s).isEmpty)
        s.phase = .running
        #expect(notes.notes(for: s) == [.ready(s.statusLine)])
        s.pairedMeters = 2
        #expect(notes.notes(for: s) == [.status(s.statusLine)])
        s.phase = .stopping
        #expect(notes.notes(for: s) == [.stopping])
        s.phase = .stopped
        #expect(notes.notes(for: s).isEmpty)
    }

    @Test("raised alerts are numbered and only the newest are kept")
    func raisedAlerts() {
        var s = DaemonSnapshot()
        for i in 1...(DaemonSnapshot.keptAlerts + 3) { s.raise(DaemonAlert.bluetoothdNotAnswering, "m\(i)") }
        #expect(s.alerts.count == DaemonSnapshot.keptAlerts)
        #expect(s.alerts.first?.number == 4)
        #expect(s.alerts.last?.number == DaemonSnapshot.keptAlerts + 3)
        s.raise(DaemonAlert.meterBondLost, "lost", meter: "AA")
        #expect(s.alerts.last?.meter == "AA")
    }
}
