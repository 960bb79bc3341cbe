import GatewayCore
import Testing
@testable import Meters

@Suite("Stoppable link", .timeLimit(.minutes(1)))
struct StoppableLinkTests {
    static let a = MeterLinkEvent.value(.glucoseMeasurement, [0x01])
    static let b = MeterLinkEvent.value(.glucoseMeasurementContext, [0x02])
    static let c = MeterLinkEvent.value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01])

    @Test func groupsPassThroughWholeAndEndAtTheDisconnection() async {
        let base = GroupedLink()
        let link = StoppableLink(base)
        base.channel.yield([Self.a, Self.b])
        base.channel.yield([Self.c, .disconnected(reason: "gone"), Self.a])
        var received: [[MeterLinkEvent]] = []
        for await group in link.eventGroups { received.append(group) }
        #expect(received == [[Self.a, Self.b], [Self.c, .disconnected(reason: "gone")]])
    }

    @Test func endingItFollowsTheValuesAlreadyPassedOn() async {
        let base = GroupedLink()
        let link = StoppableLink(base)
        var events = link.events.makeAsyncIterator()
        base.channel.yield([Self.a, Self.b])
        #expect(await events.next() == Self.a)
        #expect(await events.next() == Self.b)
        link.end(reason: "stopping")
        base.channel.yield([Self.c])
        #expect(await events.next() == .disconnected(reason: "stopping"))
        #expect(await events.next() == nil)
    }
}

/// A link that hands its events in groups.
private final class GroupedLink: MeterLink {
    let channel = MeterLinkEventChannel()
    var events: AsyncStream<MeterLinkEvent> { channel.events }
    var eventGroups: AsyncStream<[MeterLinkEvent]> { channel.eventGroups }
    var address: String { "AA:BB:CC:DD:EE:01" }
    func hasCharacteristic(_ uuid: GATTUUID) async -> Bool { false }
    func read(_ uuid: GATTUUID) async throws(MeterLinkError) -> [UInt8] { throw MeterLinkError(.notSupported, "none") }
    func write(_ uuid: GATTUUID, _ value: [UInt8]) async throws(MeterLinkError) { throw MeterLinkError(.notSupported, "none") }
    func subscribe(_ uuid: GATTUUID) async throws(MeterLinkError) { throw MeterLinkError(.notSupported, "none") }
    func unsubscribe(_ uuid: GATTUUID) async {}
    func disconnect() async { channel.finish(after: [.disconnected(reason: "local")]) }
}
