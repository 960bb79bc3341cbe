import GatewayCore
import Testing

@Suite("Meter link event channel")
struct MeterLinkEventChannelTests {
    static let a = MeterLinkEvent.value(.glucoseMeasurement, [0x01])
    static let b = MeterLinkEvent.value(.glucoseMeasurementContext, [0x02])
    static let c = MeterLinkEvent.value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01])
    static let end = MeterLinkEvent.disconnected(reason: "gone")

    static func drain<S: AsyncSequence & Sendable>(_ stream: S) async -> [S.Element] where S.Element: Sendable {
        var out: [S.Element] = []
        do { for try await element in stream { out.append(element) } } catch {}
        return out
    }

    @Test func groupsKeepTheirOrderAndNothingFollowsTheEnd() async {
        let channel = MeterLinkEventChannel()
        let groups = channel.eventGroups
        channel.yield([Self.a, Self.b])
        channel.yield([])
        channel.yield([Self.c])
        channel.finish(after: [Self.end])
        channel.yield([Self.a])
        channel.finish(after: [Self.b])
        #expect(await Self.drain(groups) == [[Self.a, Self.b], [Self.c], [Self.end]])
        // The other view was not chosen: it ends at once.
        #expect(await Self.drain(channel.events).isEmpty)
    }

    @Test func singleEventsAreTheGroupsInOrder() async {
        let channel = MeterLinkEventChannel()
        let events = channel.events
        channel.yield([Self.a, Self.b])
        channel.yield([Self.c])
        channel.finish(after: [Self.end])
        #expect(await Self.drain(events) == [Self.a, Self.b, Self.c, Self.end])
        #expect(await Self.drain(channel.eventGroups).isEmpty)
    }

    @Test func whatArrivesBeforeAConsumerChoosesIsKept() async {
        let single = MeterLinkEventChannel()
        single.yield([Self.a])
        single.yield([Self.b, Self.c])
        single.finish(after: [Self.end])
        #expect(await Self.drain(single.events) == [Self.a, Self.b, Self.c, Self.end])

        let grouped = MeterLinkEventChannel()
        grouped.yield([Self.a])
        grouped.yield([Self.b, Self.c])
        #expect(await Self.drain(grouped.eventGroups.prefix(2)) == [[Self.a], [Self.b, Self.c]])
        grouped.finish()
        #expect(await Self.drain(grouped.eventGroups).isEmpty)
    }

    @Test func aLinkWithoutGroupsGivesGroupsOfOne() async {
        let link = PlainLink()
        let groups = link.eventGroups
        link.continuation.yield(Self.a)
        link.continuation.yield(Self.b)
        link.continuation.yield(Self.end)
        link.continuation.finish()
        #expect(await Self.drain(groups) == [[Self.a], [Self.b], [Self.end]])
    }
}

/// A link with `events` only.
private final class PlainLink: MeterLink {
    let events: AsyncStream<MeterLinkEvent>
    let continuation: AsyncStream<MeterLinkEvent>.Continuation
    init() { (events, continuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded) }
    var address: String { "AA:BB:CC:DD:EE:01" }
    func hasCharacteristic(_ uuid: GATTUUID) async -> Bool { false }
    func read(_ uuid: GATTUUID) async throws(MeterLinkError) -> [UInt8] { throw MeterLinkError(.notSupported, "none") }
    func write(_ uuid: GATTUUID, _ value: [UInt8]) async throws(MeterLinkError) { throw MeterLinkError(.notSupported, "none") }
    func subscribe(_ uuid: GATTUUID) async throws(MeterLinkError) { throw MeterLinkError(.notSupported, "none") }
    func unsubscribe(_ uuid: GATTUUID) async {}
    func disconnect() async {}
}
