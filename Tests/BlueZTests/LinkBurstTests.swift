import Testing
import DBusKit
import GatewayCore
@testable import BlueZ

/// When a meter link lets the connection gather notifications: only while a report of records runs.
@Suite struct LinkBurstTests {
    static let device = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01"
    static let owner = ":1.7"
    static let racpPath = device + "/service0010/char0019"
    static let measurementPath = device + "/service0010/char0011"

    static func core() -> LinkCore {
        let core = LinkCore(devicePath: device, owner: owner)
        core.setCharacteristics([GATTUUID.recordAccessControlPoint.uuidString: racpPath,
                                 GATTUUID.glucoseMeasurement.uuidString: measurementPath])
        core.setSubscribed(.recordAccessControlPoint, true)
        core.setSubscribed(.glucoseMeasurement, true)
        return core
    }

    static func value(_ path: String, _ bytes: [UInt8]) -> DBusMessage {
        DBusMessage(kind: .signal, path: path, interface: DBusNames.properties, member: "PropertiesChanged", sender: owner,
                    body: [.string(BlueZNames.gattCharacteristic), .vardict(["Value": .bytes(bytes)]), .strings([])])
    }

    @Test func aReportRequestStartsItAndItsResponseEndsIt() {
        let core = Self.core()
        #expect(!core.isReporting)
        core.racpRequest([0x01, 0x01], writing: true)
        #expect(core.isReporting)
        core.handle(Self.value(Self.measurementPath, [0x00, 0x01, 0x00]))
        #expect(core.isReporting)
        core.handle(Self.value(Self.racpPath, [0x06, 0x00, 0x01, 0x01]))
        #expect(!core.isReporting)
        core.flush()
    }

    @Test func otherRequestsAndFailedWritesDoNotStartIt() {
        let core = Self.core()
        // Report Number of Stored Records and Abort are answered by one indication.
        core.racpRequest([0x04, 0x01], writing: true)
        core.racpRequest([0x03, 0x00], writing: true)
        #expect(!core.isReporting)
        core.racpRequest([], writing: true)
        #expect(!core.isReporting)
        core.racpRequest([0x01, 0x03, 0x01, 0x05, 0x00], writing: true)
        #expect(core.isReporting)
        core.racpRequest([0x01, 0x03, 0x01, 0x05, 0x00], writing: false)
        #expect(!core.isReporting)
    }

    @Test func aPassIsHandedOnAsOneGroupAndTheEndFollowsItsValues() async {
        let core = Self.core()
        let groups = core.channel.eventGroups
        core.handle(Self.value(Self.measurementPath, [0x00, 0x01, 0x00]))
        core.handle(Self.value(Self.measurementPath, [0x00, 0x02, 0x00]))
        core.flush()
        core.flush()
        core.handle(Self.value(Self.racpPath, [0x06, 0x00, 0x01, 0x01]))
        core.end("the meter disconnected")
        core.handle(Self.value(Self.measurementPath, [0x00, 0x03, 0x00]))
        core.flush()
        var received: [[MeterLinkEvent]] = []
        for await group in groups { received.append(group) }
        #expect(received == [
            [.value(.glucoseMeasurement, [0x00, 0x01, 0x00]), .value(.glucoseMeasurement, [0x00, 0x02, 0x00])],
            [.value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01]), .disconnected(reason: "the meter disconnected")],
        ])
    }

    @Test func singleEventsComeInTheSameOrder() async {
        let core = Self.core()
        core.handle(Self.value(Self.measurementPath, [0x00, 0x01, 0x00]))
        core.flush()
        core.handle(Self.value(Self.racpPath, [0x06, 0x00, 0x01, 0x01]))
        core.end("the meter disconnected")
        var received: [MeterLinkEvent] = []
        for await event in core.channel.events { received.append(event) }
        #expect(received == [.value(.glucoseMeasurement, [0x00, 0x01, 0x00]),
                             .value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x01]),
                             .disconnected(reason: "the meter disconnected")])
    }

    @Test func eachValueGoesToItsCharacteristicAlsoWhenTheMapChanges() async {
        let core = Self.core()
        let contextPath = Self.device + "/service0010/char0014"
        let unknownPath = Self.device + "/service0010/char0099"
        core.handle(Self.value(Self.measurementPath, [1]))
        core.handle(Self.value(Self.measurementPath, [2]))
        core.handle(Self.value(Self.racpPath, [3]))
        core.handle(Self.value(unknownPath, [4]))
        core.handle(Self.value(Self.measurementPath, [5]))
        core.flush()
        // The same path now names another characteristic, which is not subscribed, then is.
        core.setCharacteristics([GATTUUID.glucoseMeasurementContext.uuidString: Self.measurementPath,
                                 GATTUUID.glucoseMeasurement.uuidString: contextPath])
        core.handle(Self.value(Self.measurementPath, [6]))
        core.setSubscribed(.glucoseMeasurementContext, true)
        core.handle(Self.value(Self.measurementPath, [7]))
        core.handle(Self.value(contextPath, [8]))
        core.setSubscribed(.glucoseMeasurement, false)
        core.handle(Self.value(contextPath, [9]))
        core.end("the meter disconnected")
        var received: [MeterLinkEvent] = []
        for await event in core.channel.events { received.append(event) }
        #expect(received == [
            .value(.glucoseMeasurement, [1]), .value(.glucoseMeasurement, [2]), .value(.recordAccessControlPoint, [3]),
            .value(.glucoseMeasurement, [5]), .value(.glucoseMeasurementContext, [7]), .value(.glucoseMeasurement, [8]),
            .disconnected(reason: "the meter disconnected"),
        ])
    }

    @Test func theEndOfTheLinkEndsIt() {
        let core = Self.core()
        core.racpRequest([0x01, 0x01], writing: true)
        core.end("the meter disconnected")
        #expect(!core.isReporting)
    }
}
