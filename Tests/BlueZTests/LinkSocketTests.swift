import Testing
import DBusKit
import GatewayCore
import TestSupport
@testable import BlueZ
#if canImport(Glibc)
import Glibc
#endif

/// Notifications that come through the socket of an `AcquireNotify`: a socket pair stands for bluetoothd's,
/// our end of it written as bluetoothd writes (one value per packet).
@Suite(.timeLimit(.minutes(1))) struct LinkSocketTests {
    static let device = LinkBurstTests.device
    static let contextPath = device + "/service0010/char0014"

    /// A link core with the measurement, its context and the RACP subscribed.
    static func core() -> LinkCore {
        let core = LinkCore(devicePath: device, owner: LinkBurstTests.owner)
        core.setCharacteristics([GATTUUID.recordAccessControlPoint.uuidString: LinkBurstTests.racpPath,
                                 GATTUUID.glucoseMeasurement.uuidString: LinkBurstTests.measurementPath,
                                 GATTUUID.glucoseMeasurementContext.uuidString: contextPath])
        for uuid: GATTUUID in [.recordAccessControlPoint, .glucoseMeasurement, .glucoseMeasurementContext] {
            core.setSubscribed(uuid, true)
        }
        return core
    }

    /// A connected SOCK_SEQPACKET pair: (the end given to the link, bluetoothd's end).
    static func socketPair() throws -> (link: Int32, bluetoothd: Int32) {
        var fds: [Int32] = [-1, -1]
        let kind = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        try #require(socketpair(AF_UNIX, kind, 0, &fds) == 0)
        return (fds[0], fds[1])
    }

    static func send(_ fd: Int32, _ bytes: [UInt8]) {
        let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        #expect(sent == bytes.count)
    }

    /// Whether the other end of `fd` was closed, waiting up to `seconds` for it.
    static func peerClosed(_ fd: Int32, seconds: Int32 = 5) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&entry, 1, seconds * 1000) == 1 else { return false }
        return entry.revents & Int16(POLLHUP) != 0
    }

    /// Polls `condition` until it holds or `seconds` pass.
    static func eventually(seconds: Double = 5, _ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }

    static func events(of core: LinkCore) async -> [MeterLinkEvent] {
        var out: [MeterLinkEvent] = []
        for await event in core.channel.events { out.append(event) }
        return out
    }

    @Test func whatASocketHoldsComesBeforeABusValueThatFollowsIt() async throws {
        let core = Self.core()
        let (mine, theirs) = try Self.socketPair()
        defer { close(theirs) }
        // bluetoothd writes a record into the socket the moment it arrives; the report's end, an indication
        // it sends over the bus, comes after: the link must not let the bus overtake the socket.
        Self.send(theirs, [0x00, 0x01, 0x00])
        Self.send(theirs, [0x00, 0x02, 0x00])
        #expect(core.attach(.glucoseMeasurement, descriptor: mine))
        Self.send(theirs, [0x00, 0x03, 0x00])
        core.handle(LinkBurstTests.value(LinkBurstTests.racpPath, [0x06, 0x00, 0x01, 0x01]))
        core.end("the meter disconnected")
        #expect(await Self.events(of: core) == [
            .value(.glucoseMeasurement, [0x00, 0x01, 0x00]), .value(.glucoseMeasurement, [0x00, 0x02, 0x00]),
            .value(.glucoseMeasurement, [0x00, 0x03, 0x00]), .value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01]),
            .disconnected(reason: "the meter disconnected"),
        ])
        // Ending the link closed its socket: bluetoothd sees the hang-up and stops the notifications.
        #expect(Self.peerClosed(theirs))
        #expect(!core.isAcquired(.glucoseMeasurement))
    }

    /// More packets than one system call takes (`GG_PACKETS_PER_CALL`): still one wake-up, one group.
    @Test func everyPacketWaitingIsTakenInOneWakeUp() async throws {
        let core = Self.core()
        let groups = core.channel.eventGroups
        let (mine, theirs) = try Self.socketPair()
        defer { close(theirs) }
        for seq: UInt8 in 1...150 { Self.send(theirs, [0x00, seq, 0x00]) }
        #expect(core.attach(.glucoseMeasurement, descriptor: mine))
        var first: [MeterLinkEvent] = []
        for await group in groups {
            first = group
            break
        }
        #expect(first == (1...150).map { .value(.glucoseMeasurement, [0x00, UInt8($0), 0x00]) })
        core.end("done")
    }

    @Test func valuesFromTwoSocketsComeOnceEachInTheirOrderAndBeforeTheBusValueThatFollows() async throws {
        let core = Self.core()
        let (measurementEnd, measurementPeer) = try Self.socketPair()
        let (contextEnd, contextPeer) = try Self.socketPair()
        defer { close(measurementPeer); close(contextPeer) }
        core.racpRequest([0x01, 0x01], writing: true)
        #expect(core.attach(.glucoseMeasurementContext, descriptor: contextEnd))
        #expect(core.attach(.glucoseMeasurement, descriptor: measurementEnd))
        // As bluetoothd handles them: each measurement, then its context, while the link reads. Between
        // two sockets the order is not kept (a context can come before or after its measurement, and the
        // download pairs them by sequence number); within each it is, and the bus value comes last.
        for seq: UInt8 in 1...30 {
            Self.send(measurementPeer, [0x10, seq, 0x00])
            Self.send(contextPeer, [0x00, seq, 0x00])
        }
        core.handle(LinkBurstTests.value(LinkBurstTests.racpPath, [0x06, 0x00, 0x01, 0x01]))
        core.end("the meter disconnected")
        let events = await Self.events(of: core)
        func sequences(_ uuid: GATTUUID) -> [UInt8] {
            events.compactMap { event in
                if case .value(let from, let bytes) = event, from == uuid { return bytes[1] }
                return nil
            }
        }
        #expect(sequences(.glucoseMeasurement) == Array(1...30))
        #expect(sequences(.glucoseMeasurementContext) == Array(1...30))
        #expect(events.count == 62)
        #expect(events.suffix(2) == [.value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01]),
                                     .disconnected(reason: "the meter disconnected")])
    }

    @Test func anEmptyPacketIsNotAHangUpAndAClosedSocketIs() async throws {
        let core = Self.core()
        let (mine, theirs) = try Self.socketPair()
        #expect(core.attach(.glucoseMeasurement, descriptor: mine))
        Self.send(theirs, [])
        Self.send(theirs, [0x00, 0x01, 0x00])
        // Longer than any attribute value: not a value as the meter sent it, dropped.
        Self.send(theirs, [UInt8](repeating: 0xAB, count: 600))
        Self.send(theirs, [0x00, 0x02, 0x00])
        close(theirs)
        // bluetoothd closing the socket (the link went down, or it gave the notifications up) forgets the
        // socket; the link itself ends on the bus's word (Connected=false), not on this.
        #expect(await Self.eventually { !core.isAcquired(.glucoseMeasurement) })
        #expect(!core.isEnded)
        core.end("the meter disconnected")
        #expect(await Self.events(of: core) == [
            .value(.glucoseMeasurement, [0x00, 0x01, 0x00]), .value(.glucoseMeasurement, [0x00, 0x02, 0x00]),
            .disconnected(reason: "the meter disconnected"),
        ])
    }

    @Test func detachingClosesTheSocketAndAnUnsubscribedValueIsDropped() async throws {
        let core = Self.core()
        let (mine, theirs) = try Self.socketPair()
        defer { close(theirs) }
        #expect(core.attach(.glucoseMeasurement, descriptor: mine))
        core.setSubscribed(.glucoseMeasurement, false)
        Self.send(theirs, [0x00, 0x01, 0x00])
        #expect(core.detach(.glucoseMeasurement))
        #expect(!core.detach(.glucoseMeasurement))
        #expect(Self.peerClosed(theirs))
        core.end("the meter disconnected")
        #expect(await Self.events(of: core) == [.disconnected(reason: "the meter disconnected")])
    }

    @Test func aSocketHandedToAnEndedLinkIsClosed() throws {
        let core = Self.core()
        core.end("the meter disconnected")
        let (mine, theirs) = try Self.socketPair()
        defer { close(theirs) }
        #expect(!core.attach(.glucoseMeasurement, descriptor: mine))
        #expect(Self.peerClosed(theirs))
        #expect(!core.isAcquired(.glucoseMeasurement))
    }
}
