import Testing
import Synchronization
import TestSupport
@testable import DBusKit

/// Burst subscribers on a real bus: every message is delivered in order and each pass ends, whether the
/// connection pauses or not; it asks the subscriber only after passes that held nothing else.
@Suite(.timeLimit(.minutes(1))) struct BurstSubscriptionTests {
    final class Counts: Sendable {
        let state = Mutex<(seen: [UInt32], atLastEnd: Int, asks: Int)>(([], 0, 0))
        var seen: [UInt32] { state.withLock { $0.seen } }
        var atLastEnd: Int { state.withLock { $0.atLastEnd } }
        var asks: Int { state.withLock { $0.asks } }
    }

    static func subscribe(_ client: DBusConnection, _ counts: Counts, wanted: Bool = true) async throws -> DBusSubscription {
        try await client.subscribe([MatchRule(interface: "org.example.Tick", member: "Tick")], onMessage: { message in
            let n = message.body.first?.uint32 ?? .max
            counts.state.withLock { $0.seen.append(n) }
        }, onBatchEnd: {
            counts.state.withLock { $0.atLastEnd = $0.seen.count }
        }, awaitsBurst: {
            counts.state.withLock { $0.asks += 1 }
            return wanted
        }, onEnd: {})
    }

    static func emit(_ pair: BusPair, _ range: Range<UInt32>) async throws {
        for n in range {
            try await pair.server.emitSignal(path: "/t", interface: "org.example.Tick", member: "Tick", arguments: [.uint32(n)])
        }
    }

    @Test(arguments: [true, false]) func everyMessageArrivesInOrderAndEveryPassEnds(wanted: Bool) async throws {
        let pair = try await BusPair()
        let counts = Counts()
        let subscription = try await Self.subscribe(pair.client, counts, wanted: wanted)
        try await Self.emit(pair, 0..<300)
        // A method call in the middle of a burst is answered (its reply ends any pause).
        let calling = Task { try await Self.emit(pair, 300..<600) }
        _ = try await pair.client.call(destination: DBusNames.bus, path: DBusNames.busPath, interface: DBusNames.bus,
                                       member: "GetId", timeout: .seconds(5))
        try await calling.value
        try #require(await waitUntil(20) { counts.atLastEnd == 600 })
        #expect(counts.seen == Array(0..<600))
        // Passes of ticks alone: the subscriber was asked.
        #expect(counts.asks > 0)
        subscription.cancel()
        await pair.close()
    }

    @Test func aSignalAnotherSubscriberTakesIsNotHeldBack() async throws {
        let pair = try await BusPair()
        let counts = Counts()
        let subscription = try await Self.subscribe(pair.client, counts)
        let plain = try await pair.client.subscribe(MatchRule(interface: "org.example.Tick", member: "Tick"))
        try await Self.emit(pair, 0..<200)
        try #require(await waitUntil(20) { counts.atLastEnd == 200 })
        // Every pass held a tick for the plain stream too: never a pause, so never asked.
        #expect(counts.asks == 0)
        _ = plain
        subscription.cancel()
        await pair.close()
    }

    @Test func aSignalALocalFilterRejectsCountsAsNotDelivered() async throws {
        let pair = try await BusPair()
        let counts = Counts()
        let subscription = try await Self.subscribe(pair.client, counts)
        let filtered = try await pair.client.subscribe([MatchRule(interface: "org.example.Tick", member: "Tick")],
                                                       where: { _ in false })
        try await Self.emit(pair, 0..<200)
        try #require(await waitUntil(20) { counts.atLastEnd == 200 })
        #expect(counts.asks > 0)
        _ = filtered
        subscription.cancel()
        await pair.close()
    }
}

/// Several match rules are installed with one round of `AddMatch` calls.
@Suite(.timeLimit(.minutes(1))) struct MatchRulesTests {
    @Test func aRuleTheBusRefusesFailsTheWholeSubscription() async throws {
        let pair = try await BusPair()
        let seen = Mutex(0)
        let good = MatchRule(interface: "org.example.Tick", member: "Tick")
        // The bus knows arguments 0 to 63 only.
        let refused = MatchRule(interface: "org.example.Tick", member: "Tock", arguments: [64: "x"])
        await #expect(throws: DBusError.self) {
            _ = try await pair.client.subscribe([good, refused, good], onMessage: { _ in seen.withLock { $0 += 1 } }, onEnd: {})
        }
        // Nothing of it stays: the rules that were added are removed with it.
        let control = try await pair.client.subscribe(MatchRule(interface: "org.example.Tick", member: "Done"))
        try await pair.server.emitSignal(path: "/t", interface: "org.example.Tick", member: "Tick", arguments: [.uint32(1)])
        try await pair.server.emitSignal(path: "/t", interface: "org.example.Tick", member: "Done")
        let done = try await withTimeout(5) { () -> Bool in
            for await _ in control { return true }
            return false
        }
        #expect(done)
        #expect(seen.withLock { $0 } == 0)
        await pair.close()
    }

    @Test func everyRuleOfASubscriptionIsInstalled() async throws {
        let pair = try await BusPair()
        let members = (0..<6).map { "M\($0)" }
        let stream = try await pair.client.subscribe(members.map { MatchRule(interface: "org.example.Many", member: $0) })
        for member in members.reversed() {
            try await pair.server.emitSignal(path: "/m", interface: "org.example.Many", member: member)
        }
        let got = try await withTimeout(5) { () -> [String] in
            var out: [String] = []
            for await message in stream {
                out.append(message.member ?? "")
                if out.count == members.count { break }
            }
            return out
        }
        #expect(got == members.reversed())
        await pair.close()
    }
}
