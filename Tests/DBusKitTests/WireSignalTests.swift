import Testing
@testable import DBusKit
import TestSupport

/// `WireSignal` reads a signal's header and a `PropertiesChanged` body from the wire bytes libdbus
/// validated; wherever it answers, it must give what libdbus gives field by field, and it must leave to
/// libdbus whatever it does not know.
@Suite struct WireSignalTests {
    static let path = "/org/bluez/hci0/dev_C0_26_DA_0B_E4_02/service000a/char000b"

    static func bytes(_ body: [DBusValue], serial: UInt32 = 7, path: String = path, sender: String? = ":1.42",
                      destination: String? = nil) throws -> [UInt8] {
        try WireSignal.signalBytes(path: path, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                                   sender: sender, destination: destination, serial: serial, body: body)
    }

    @Test(arguments: PropertiesChangedDecodingTests.bodies) func theSameMessageAsLibdbusGivesFieldByField(_ body: [DBusValue]) throws {
        var cache = WireSignalCache()
        let (wire, libdbus, _) = try WireSignal.decodeBothWays(try Self.bytes(body), cache: &cache)
        #expect(wire == libdbus)
        #expect(libdbus.body == body)
        #expect(libdbus.serial == 7 && libdbus.path == Self.path && libdbus.sender == ":1.42")
    }

    @Test func aGATTNotificationIsReadFromTheWireAndTheHeaderComesFromTheLastOneWhenTheSame() throws {
        var cache = WireSignalCache()
        for serial in UInt32(1)...5 {
            let body: [DBusValue] = [.string("org.bluez.GattCharacteristic1"), .vardict(["Value": .bytes([0x0B, UInt8(serial), 0, 0xE8, 0x07])]), .strings([])]
            let (wire, libdbus, bodyFromWire) = try WireSignal.decodeBothWays(try Self.bytes(body, serial: serial), cache: &cache)
            let decoded = try #require(wire)
            #expect(bodyFromWire)
            #expect(decoded == libdbus)
            #expect(decoded.serial == serial && decoded.body == body)
        }
        // Another path, another sender, a destination: the header is read again, not taken from the last.
        let body: [DBusValue] = [.string("org.bluez.GattCharacteristic1"), .vardict(["Value": .bytes([])]), .strings([])]
        let other = try WireSignal.decodeBothWays(try Self.bytes(body, serial: 9, path: "/org/bluez/hci1", sender: ":1.7", destination: ":1.9"),
                                                  cache: &cache)
        #expect(other.wire == other.libdbus)
        #expect(other.wire?.path == "/org/bluez/hci1" && other.wire?.sender == ":1.7" && other.wire?.destination == ":1.9")
        // Back to the first path: the fields differ from the last message's, so read again, and right.
        let again = try WireSignal.decodeBothWays(try Self.bytes(body, serial: 10), cache: &cache)
        #expect(again.wire == again.libdbus && again.wire?.path == Self.path && again.wire?.serial == 10)
    }

    @Test func randomPropertiesChangedBodiesOfBasicTypesDecodeAsLibdbusDecodesThem() throws {
        var rng = SplitMix(seed: 0x5157_4952_4531)
        var cache = WireSignalCache()
        var bodiesFromTheWire = 0
        var singleByteArrays = 0
        for round in 0..<400 {
            var entries: [DBusDictEntry] = []
            var onlyKnownTypes = true
            for n in 0..<Int(rng.next() % 4) {
                let value: DBusValue
                switch rng.next() % 14 {
                case 0: value = .byte(UInt8(truncatingIfNeeded: rng.next()))
                case 1: value = .bool(rng.next() % 2 == 0)
                case 2: value = .int16(Int16(truncatingIfNeeded: rng.next()))
                case 3: value = .uint16(UInt16(truncatingIfNeeded: rng.next()))
                case 4: value = .int32(Int32(truncatingIfNeeded: rng.next()))
                case 5: value = .uint32(UInt32(truncatingIfNeeded: rng.next()))
                case 6: value = .int64(Int64(bitPattern: rng.next()))
                case 7: value = .uint64(rng.next())
                case 8: value = .double(Double(bitPattern: rng.next() & 0x7FEF_FFFF_FFFF_FFFF))
                case 9: value = .string(String(repeating: "é", count: Int(rng.next() % 5)))
                case 10: value = .objectPath("/p\(round)")
                case 11: value = .signature("a{sv}")
                case 12:
                    value = .array(element: "s", [.string("x")])   // left to libdbus
                    onlyKnownTypes = false
                default: value = .bytes((0..<Int(rng.next() % 40)).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
                }
                entries.append(DBusDictEntry(.string("K\(n)"), .variant(value)))
            }
            let invalidated = (0..<Int(rng.next() % 3)).map { DBusValue.string("I\($0)") }
            let body: [DBusValue] = [.string("org.example.I\(round % 3)"), .dictionary(key: "s", value: "v", entries),
                                     .array(element: "s", invalidated)]
            let message = try Self.bytes(body, serial: UInt32(round + 1))
            let (wire, libdbus, bodyFromWire) = try WireSignal.decodeBothWays(message, cache: &cache)
            #expect(wire == libdbus, "round \(round)")
            #expect(libdbus.body == body, "round \(round)")
            #expect(bodyFromWire == onlyKnownTypes, "round \(round)")
            if bodyFromWire { bodiesFromTheWire += 1 }
            // Read in place only when it is one byte array and no invalidated name, and then the same.
            let property = try WireSignal.propertyBytes(of: message)
            if entries.count == 1, invalidated.isEmpty, case .variant(.bytes(let value)) = entries[0].value {
                #expect(property?.name == "K0" && property?.value == value && property?.interface == "org.example.I\(round % 3)",
                        "round \(round)")
                singleByteArrays += 1
            } else {
                #expect(property == nil, "round \(round)")
            }
        }
        #expect(singleByteArrays >= 1)
        // Most bodies hold only types the wire reader knows; the rest went to libdbus and came back the same.
        #expect(bodiesFromTheWire > 200)
    }

    @Test func aBigEndianMessageComesOutTheSameEitherWay() throws {
        // A signal as a big-endian machine writes it: "/a", "a.b", "C", signature "s", body "xy".
        var m: [UInt8] = [UInt8(ascii: "B"), 4, 0, 1]
        func u32(_ v: UInt32) { m += [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }
        func pad(_ n: Int) { while m.count % n != 0 { m.append(0) } }
        func field(_ code: UInt8, _ type: Character, _ text: String) {
            pad(8)
            m += [code, 1, UInt8(ascii: type.unicodeScalars.first ?? "s"), 0]
            if type == "g" {
                m.append(UInt8(text.utf8.count))
            } else {
                pad(4)
                u32(UInt32(text.utf8.count))
            }
            m += Array(text.utf8) + [0]
        }
        u32(7)      // body length: 4 + 2 + NUL
        u32(3)      // serial
        u32(0)      // the fields' length, set below
        field(1, "o", "/a")
        field(2, "s", "a.b")
        field(3, "s", "C")
        field(8, "g", "s")
        let fieldsLength = UInt32(m.count - 16)
        m[12] = UInt8(fieldsLength >> 24); m[13] = UInt8((fieldsLength >> 16) & 0xFF)
        m[14] = UInt8((fieldsLength >> 8) & 0xFF); m[15] = UInt8(fieldsLength & 0xFF)
        pad(8)
        u32(2)
        m += Array("xy".utf8) + [0]
        var cache = WireSignalCache()
        let (wire, libdbus, _) = try WireSignal.decodeBothWays(m, cache: &cache)
        // libdbus may hand out a received message in its own byte order; read either way, it is the same.
        #expect(wire == nil || wire == libdbus)
        #expect(libdbus.path == "/a" && libdbus.interface == "a.b" && libdbus.member == "C" && libdbus.serial == 3)
        #expect(libdbus.body == [.string("xy")])
    }

    @Test func otherBodiesKeepTheWireHeaderAndTakeTheirBodyFromLibdbus() throws {
        var cache = WireSignalCache()
        for body: [DBusValue] in [[.string("a"), .uint32(1)], [], [.vardict(["A": .bool(true)])]] {
            let (wire, libdbus, bodyFromWire) = try WireSignal.decodeBothWays(try Self.bytes(body), cache: &cache)
            #expect(wire == libdbus)
            #expect(wire?.body == body)
            #expect(!bodyFromWire)
        }
    }

    /// One property changed to a byte array, none invalidated: read in place, and the same interface, name
    /// and bytes as the full decoding gives. Every other body is left to the full decoding.
    @Test(arguments: PropertiesChangedDecodingTests.bodies + [
        [.string("org.bluez.GattCharacteristic1"), .vardict(["Value": .bytes([1])]), .strings(["Value"])],
        [.string("org.bluez.GattCharacteristic1"), .vardict(["Notifying": .bool(true)]), .strings([])],
        [.string("org.bluez.GattCharacteristic1"), .vardict(["Value": .bytes(Array(0...255))]), .strings([])],
        [.string("org.bluez.GattDescriptor1"), .vardict(["Value": .bytes([0x01, 0x00])]), .strings([])],
        [.string("org.bluez.GattCharacteristic1"), .vardict(["Value": .array(element: "q", [.uint16(1)])]), .strings([])],
    ] as [[DBusValue]])
    func aSingleByteArrayPropertyIsReadInPlaceAndNothingElseIs(_ body: [DBusValue]) throws {
        let read = try WireSignal.propertyBytes(of: try Self.bytes(body))
        var expected: (String, String, [UInt8])?
        if body.count == 3, case .string(let interface) = body[0], let entries = body[1].dictionaryEntries, entries.count == 1,
           case .string(let name) = entries[0].key, case .variant(.bytes(let value)) = entries[0].value,
           body[2].stringArray?.isEmpty == true {
            expected = (interface, name, value)
        }
        #expect(read?.interface == expected?.0)
        #expect(read?.name == expected?.1)
        #expect(read?.value == expected?.2)
        #expect((read == nil) == (expected == nil))
    }
}
