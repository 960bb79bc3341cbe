import Testing
@testable import DBusKit

@Suite struct MarshallingTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var value: DBusValue
        var signature: String
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "byte", value: .byte(0xFF), signature: "y"),
        Case(name: "bool true", value: .bool(true), signature: "b"),
        Case(name: "bool false", value: .bool(false), signature: "b"),
        Case(name: "int16 min", value: .int16(.min), signature: "n"),
        Case(name: "uint16 max", value: .uint16(.max), signature: "q"),
        Case(name: "int32 min", value: .int32(.min), signature: "i"),
        Case(name: "uint32 max", value: .uint32(.max), signature: "u"),
        Case(name: "int64 min", value: .int64(.min), signature: "x"),
        Case(name: "uint64 max", value: .uint64(.max), signature: "t"),
        Case(name: "double", value: .double(-1234.5625), signature: "d"),
        Case(name: "string unicode", value: .string("Glucomètre ✓ 血糖"), signature: "s"),
        Case(name: "empty string", value: .string(""), signature: "s"),
        Case(name: "object path", value: .objectPath("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"), signature: "o"),
        Case(name: "root path", value: .objectPath("/"), signature: "o"),
        Case(name: "signature", value: .signature("a{oa{sa{sv}}}"), signature: "g"),
        Case(name: "bytes", value: .bytes([0x01, 0x00, 0xFF, 0x7F]), signature: "ay"),
        Case(name: "empty bytes", value: .bytes([]), signature: "ay"),
        Case(name: "string array", value: .strings(["00001808-0000-1000-8000-00805f9b34fb", "x"]), signature: "as"),
        Case(name: "empty array", value: .array(element: "s", []), signature: "as"),
        Case(name: "array of byte arrays", value: .array(element: "ay", [.bytes([1, 2]), .bytes([])]), signature: "aay"),
        Case(name: "vardict", value: .vardict([
            "Transport": .string("le"),
            "UUIDs": .strings(["00001808-0000-1000-8000-00805f9b34fb"]),
            "RSSI": .int16(-60),
            "DuplicateData": .bool(false),
        ]), signature: "a{sv}"),
        Case(name: "nested variants", value: .variant(.variant(.vardict(["inner": .variant(.uint32(7))]))), signature: "v"),
        Case(name: "manufacturer data a{qv}", value: .dictionary(key: "q", value: "v", [
            DBusDictEntry(.uint16(0x004C), .variant(.bytes([2, 21]))),
        ]), signature: "a{qv}"),
        Case(name: "structure", value: .structure([.byte(1), .string("a"), .bytes([9])]), signature: "(ysay)"),
        Case(name: "or_patterns a(yyay)", value: .array(element: "(yyay)", [.structure([.byte(0), .byte(3), .bytes([0x08, 0x18])])]), signature: "a(yyay)"),
        Case(name: "managed objects", value: .managedObjects([
            "/org/bluez/hci0": ["org.bluez.Adapter1": ["Powered": .bool(true), "Address": .string("00:11:22:33:44:55")]],
            "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF/service0010/char0011": [
                "org.bluez.GattCharacteristic1": [
                    "UUID": .string("00002a18-0000-1000-8000-00805f9b34fb"),
                    "Value": .bytes([]),
                    "Flags": .strings(["notify"]),
                ],
                "org.freedesktop.DBus.Properties": [:],
            ],
        ]), signature: "a{oa{sa{sv}}}"),
    ]

    @Test(arguments: cases)
    func wireRoundTrip(_ c: Case) throws {
        #expect(c.value.signature == c.signature)
        let decoded = try Marshalling.wireRoundTrip([c.value, .uint32(42)])
        #expect(decoded == [c.value, .uint32(42)])
    }

    @Test func typedAccessorsReadWhatBlueZSends() throws {
        let objects: DBusValue = .managedObjects([
            "/org/bluez/hci0/dev_AA": ["org.bluez.Device1": ["RSSI": .int16(-70), "UUIDs": .strings(["1808"]), "Paired": .bool(true)]],
        ])
        let decoded = try Marshalling.wireRoundTrip([objects])
        let mirror = try #require(decoded.first?.managedObjects)
        let device = try #require(mirror["/org/bluez/hci0/dev_AA"]?["org.bluez.Device1"])
        #expect(device["RSSI"]?.int64 == -70)
        #expect(device["UUIDs"]?.stringArray == ["1808"])
        #expect(device["Paired"]?.bool == true)
        #expect(DBusValue.variant(.bytes([1, 2])).bytes == [1, 2])
        #expect(DBusValue.array(element: "y", [.byte(3)]).bytes == [3])
        #expect(DBusValue.string("x").bytes == nil)
    }

    struct Invalid: Sendable, CustomTestStringConvertible {
        var name: String
        var value: DBusValue
        var testDescription: String { name }
    }

    static let invalid: [Invalid] = [
        Invalid(name: "relative object path", value: .objectPath("org/bluez")),
        Invalid(name: "trailing slash", value: .objectPath("/org/")),
        Invalid(name: "double slash", value: .objectPath("/org//bluez")),
        Invalid(name: "path with colon", value: .objectPath("/dev_AA:BB")),
        Invalid(name: "NUL in string", value: .string("a\u{0}b")),
        Invalid(name: "bad signature", value: .signature("a{")),
        Invalid(name: "array element mismatch", value: .array(element: "s", [.uint32(1)])),
        Invalid(name: "dict with non-basic key", value: .dictionary(key: "v", value: "s", [])),
        Invalid(name: "dict entry mismatch", value: .dictionary(key: "s", value: "v", [DBusDictEntry(.string("k"), .string("not a variant"))])),
        Invalid(name: "empty structure", value: .structure([])),
        Invalid(name: "array of dict entries", value: .array(element: "{sv}", [])),
        Invalid(name: "too deep", value: (0..<40).reduce(DBusValue.byte(0)) { inner, _ in .variant(inner) }),
    ]

    @Test(arguments: invalid)
    func invalidValuesAreErrorsNotCrashes(_ c: Invalid) {
        #expect(throws: DBusError.self) { try Marshalling.wireRoundTrip([c.value]) }
    }

    @Test func matchRuleTextQuotesApostrophes() {
        let rule = MatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.Properties",
                             member: "PropertiesChanged", pathNamespace: "/org/bluez", arguments: [0: "it's"])
        #expect(rule.description == "type='signal',sender='org.bluez',interface='org.freedesktop.DBus.Properties',"
            + "member='PropertiesChanged',path_namespace='/org/bluez',arg0='it'\\''s'")
    }

    @Test func matchRuleMatchesLocally() {
        let rule = MatchRule(interface: "org.freedesktop.DBus.Properties", pathNamespace: "/org/bluez/hci0",
                             arguments: [0: "org.bluez.GattCharacteristic1"])
        var message = DBusMessage(kind: .signal, path: "/org/bluez/hci0/dev_A/char1",
                                  interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                                  body: [.string("org.bluez.GattCharacteristic1")])
        #expect(rule.matches(message))
        message.path = "/org/bluez/hci01"
        #expect(!rule.matches(message))
        message.path = "/org/bluez/hci0"
        message.body = [.string("org.bluez.Device1")]
        #expect(!rule.matches(message))
    }

    @Test func pathNamespaceTakesThePathAndWhatIsBelowIt() {
        let rule = MatchRule(pathNamespace: "/org/bluez/hci0")
        func matches(_ path: String?) -> Bool { rule.matchesHeader(DBusMessage(kind: .signal, path: path)) }
        #expect(matches("/org/bluez/hci0"))
        #expect(matches("/org/bluez/hci0/dev_A"))
        #expect(matches("/org/bluez/hci0/dev_A/service0010/char0011"))
        #expect(!matches("/org/bluez/hci01"))
        #expect(!matches("/org/bluez/hci0_x/dev_A"))
        #expect(!matches("/org/bluez"))
        #expect(!matches("/org/bluez/hci"))
        #expect(!matches("/org/bluez/hcI0/dev_A"))
        #expect(!matches("/"))
        #expect(!matches(""))
        #expect(!matches(nil))
        #expect(MatchRule(pathNamespace: "/").matchesHeader(DBusMessage(kind: .signal, path: "/any/thing")))
        for (path, namespace) in [("/a/b/c", "/a/b"), ("/a/bc", "/a/b"), ("/a/b", "/a/b/"), ("/a/é/x", "/a/é"),
                                  ("/a/é/x", "/a/e"), ("/a/b/", "/a/b"), ("/ab", "/a")] {
            #expect(MatchRule.isBelow(path, namespace) == path.hasPrefix(namespace + "/"), "\(path) under \(namespace)")
        }
    }

    @Test func signatureSplitting() {
        #expect(ConnectionCore.splitSignature("sa{sv}as(yay)aay") == ["s", "a{sv}", "as", "(yay)", "aay"])
        #expect(ConnectionCore.splitSignature("") == [])
    }

    @Test func timeoutConversion() {
        #expect(DBusConnection.milliseconds(.seconds(90)) == 90_000)
        #expect(DBusConnection.milliseconds(.milliseconds(1.5)) == 2)
        #expect(DBusConnection.milliseconds(.zero) == 1)
        #expect(DBusConnection.milliseconds(.seconds(1_000_000_000)) == Int32.max - 1)
    }
}

/// PropertiesChanged bodies (`sa{sv}as`, every GATT notification is one) come back as sent, for every
/// kind of value a property can hold.
@Suite struct PropertiesChangedDecodingTests {
    static let bodies: [[DBusValue]] = [
        // A GATT notification as BlueZ sends it.
        [.string("org.bluez.GattCharacteristic1"), .vardict(["Value": .bytes([0x02, 0x2A, 0x00, 0xE8, 0x07])]), .strings([])],
        [.string("org.bluez.GattCharacteristic1"), .vardict(["Value": .bytes([])]), .strings([])],
        [.string("org.bluez.Device1"), .vardict([
            "Connected": .bool(true), "RSSI": .int16(-61), "UUIDs": .strings(["00001808-0000-1000-8000-00805f9b34fb"]),
            "ManufacturerData": .dictionary(key: "q", value: "v", [DBusDictEntry(.uint16(0x0131), .variant(.bytes([1, 2])))]),
            "Adapter": .objectPath("/org/bluez/hci0"), "Nested": .variant(.uint32(7)),
            "Pair": .structure([.string("a"), .int64(-1)]), "Empty": .array(element: "s", []),
        ]), .strings(["Name", "Alias"])],
        [.string(""), .dictionary(key: "s", value: "v", []), .strings([])],
        // Every other kind a variant can hold, variants in variants, containers of containers, and more
        // than one invalidated name: the path recurses into each variant itself, so each kind must come
        // back as the generic path gives it.
        [.string("org.example.Every"), .vardict([
            "Byte": .byte(0xFF), "Double": .double(-0.5), "Int32": .int32(Int32.min), "UInt64": .uint64(UInt64.max),
            "UInt16": .uint16(0), "Int64": .int64(Int64.max), "UInt32": .uint32(1), "Signature": .signature("a{sv}"),
            "String": .string("é\u{1F600}"), "Deep": .variant(.variant(.array(element: "(sy)", [.structure([.string("k"), .byte(1)])]))),
            "Nested": .dictionary(key: "s", value: "a{sv}", [DBusDictEntry(.string("inner"), .vardict(["x": .int32(3)]))]),
            "Bytes": .array(element: "ay", [.bytes([1, 2, 3]), .bytes([])]),
        ]), .strings(["A", "B", "C"])],
        // Duplicate keys stay as sent.
        [.string("x.y"), .dictionary(key: "s", value: "v", [DBusDictEntry(.string("Value"), .variant(.bytes([1]))),
                                                               DBusDictEntry(.string("Value"), .variant(.bytes([2])))]), .strings([])],
    ]

    @Test(arguments: bodies) func comeBackAsSent(_ body: [DBusValue]) throws {
        #expect(try Marshalling.wireRoundTrip(body) == body)
    }

    @Test func nearSignaturesComeBackAsSent() throws {
        // Close to sa{sv}as but not it: the same values back.
        let near: [[DBusValue]] = [
            [.string("i"), .vardict(["A": .bool(true)])],
            [.string("i"), .vardict(["A": .bool(true)]), .strings(["B"]), .byte(1)],
            [.string("i"), .dictionary(key: "s", value: "s", [DBusDictEntry(.string("A"), .string("B"))]), .strings([])],
        ]
        for body in near {
            #expect(try Marshalling.wireRoundTrip(body) == body)
        }
    }

    @Test func propertyFindsTheLastEntryWithoutADictionary() {
        let changed = DBusValue.dictionary(key: "s", value: "v", [
            DBusDictEntry(.string("Value"), .variant(.bytes([1]))), DBusDictEntry(.string("RSSI"), .variant(.int16(-4))),
            DBusDictEntry(.string("Value"), .variant(.bytes([2]))),
        ])
        #expect(changed.property("Value") == .bytes([2]))
        #expect(changed.property("Value") == changed.vardict?["Value"])
        #expect(changed.property("RSSI")?.int16 == -4)
        #expect(changed.property("Missing") == nil)
        #expect(DBusValue.bytes([1]).property("Value") == nil)
        #expect(DBusValue.dictionary(key: "o", value: "v", [DBusDictEntry(.objectPath("/a"), .variant(.byte(1)))]).property("/a") == nil)
    }
}
