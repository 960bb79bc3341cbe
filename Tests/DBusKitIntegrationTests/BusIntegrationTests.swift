import Dispatch
import Testing
import Foundation
import Synchronization
import TestSupport
@testable import DBusKit

/// Two connections on a private dbus-daemon: `server` exports objects, `client` calls them.
final class BusPair: Sendable {
    let bus: PrivateBus
    let server: DBusConnection
    let client: DBusConnection

    init() async throws {
        bus = try await PrivateBus.start()
        server = try await DBusConnection.connect(address: bus.address)
        client = try await DBusConnection.connect(address: bus.address)
    }

    func close() async {
        await client.close()
        await server.close()
        bus.close()
    }
}

@Suite(.timeLimit(.minutes(1))) struct BusIntegrationTests {
    @Test func callReachesHandlerWithSenderAndArguments() async throws {
        let pair = try await BusPair()
        try await pair.server.export(path: "/org/example/Echo", interfaces: [
            DBusInterface("org.example.Echo", methods: [
                DBusMethod("Echo", in: "sv", out: "ssv") { call in
                    [.string(call.sender)] + call.arguments
                },
            ]),
        ])
        let reply = try await pair.client.call(
            destination: pair.server.uniqueName, path: "/org/example/Echo", interface: "org.example.Echo",
            member: "Echo", arguments: [.string("hello"), .variant(.bytes([1, 2, 3]))], timeout: .seconds(5))
        #expect(reply == [.string(pair.client.uniqueName), .string("hello"), .variant(.bytes([1, 2, 3]))])
        #expect(pair.client.uniqueName.hasPrefix(":"))
        await pair.close()
    }

    /// Calls sent together are answered in the order given, each with its own reply or error.
    @Test func callsSentTogetherKeepTheirOrderAndErrors() async throws {
        let pair = try await BusPair()
        let order = Mutex<[String]>([])
        try await pair.server.export(path: "/org/example/Echo", interfaces: [
            DBusInterface("org.example.Echo", methods: [
                DBusMethod("Echo", in: "s", out: "s") { call in
                    order.withLock { $0.append(call.arguments.first?.string ?? "?") }
                    return call.arguments
                },
                DBusMethod("Fail") { _ in
                    order.withLock { $0.append("fail") }
                    throw DBusError(name: "org.example.Error.Refused", message: "refused")
                },
            ]),
        ])
        let dest = pair.server.uniqueName
        func echo(_ text: String) -> DBusCall {
            DBusCall(destination: dest, path: "/org/example/Echo", interface: "org.example.Echo", member: "Echo", arguments: [.string(text)])
        }
        let fail = DBusCall(destination: dest, path: "/org/example/Echo", interface: "org.example.Echo", member: "Fail")
        let results = await pair.client.callTogether([echo("a"), fail, echo("b"), echo("c")], timeout: .seconds(5))
        #expect(results.count == 4)
        #expect(try results[0].get() == [.string("a")])
        #expect(try results[2].get() == [.string("b")])
        #expect(try results[3].get() == [.string("c")])
        guard case .failure(let refused) = results[1] else {
            Issue.record("the failing call succeeded")
            return
        }
        #expect(refused == DBusError(name: "org.example.Error.Refused", message: "refused"))
        // (The exporter answers each call in a task of its own, so the order its handlers ran in is not
        // the order the calls came in; every one ran once.)
        #expect(order.withLock { $0 }.sorted() == ["a", "b", "c", "fail"])
        #expect(await pair.client.callTogether([], timeout: .seconds(5)).isEmpty)
        await pair.close()
    }

    @Test func errorsKeepNameAndMessage() async throws {
        let pair = try await BusPair()
        try await pair.server.export(path: "/org/bluez/hci0/dev_AA", interfaces: [
            DBusInterface("org.bluez.Device1", methods: [
                DBusMethod("Connect") { _ in
                    throw DBusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")
                },
                DBusMethod("Pair") { _ in throw CancellationError() },
            ]),
        ])
        let dest = pair.server.uniqueName
        await #expect(throws: DBusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")) {
            try await pair.client.call(destination: dest, path: "/org/bluez/hci0/dev_AA", interface: "org.bluez.Device1",
                                       member: "Connect", timeout: .seconds(5))
        }
        let other = await #expect(throws: DBusError.self) {
            try await pair.client.call(destination: dest, path: "/org/bluez/hci0/dev_AA", interface: "org.bluez.Device1",
                                       member: "Pair", timeout: .seconds(5))
        }
        #expect(other?.name == .failed)
        let unknownMethod = await #expect(throws: DBusError.self) {
            try await pair.client.call(destination: dest, path: "/org/bluez/hci0/dev_AA", interface: "org.bluez.Device1",
                                       member: "Nope", timeout: .seconds(5))
        }
        #expect(unknownMethod?.name == .unknownMethod)
        let unknownObject = await #expect(throws: DBusError.self) {
            try await pair.client.call(destination: dest, path: "/nowhere", interface: "org.bluez.Device1",
                                       member: "Connect", timeout: .seconds(5))
        }
        #expect(unknownObject?.name == .unknownObject)
        let noService = await #expect(throws: DBusError.self) {
            try await pair.client.call(destination: "org.bluez", path: "/", interface: nil,
                                       member: "Ping", timeout: .seconds(5))
        }
        #expect(noService?.name == .serviceUnknown)
        let invalid = await #expect(throws: DBusError.self) {
            try await pair.client.call(destination: dest, path: "not/a/path", interface: nil, member: "X", timeout: .seconds(5))
        }
        #expect(invalid?.name == .invalidArgs)
        await pair.close()
    }

    @Test func callTimesOutWithItsOwnTimeout() async throws {
        let pair = try await BusPair()
        // The handler answers only once the test has seen the call end.
        let callEnded = TestEvent()
        try await pair.server.export(path: "/slow", interfaces: [
            DBusInterface("org.example.Slow", methods: [
                DBusMethod("Sleep") { _ in
                    try await callEnded.wait()
                    return []
                },
            ]),
        ])
        let client = pair.client
        let dest = pair.server.uniqueName
        let error = try await withTimeout(20) { () -> DBusError? in
            do throws(DBusError) {
                _ = try await client.call(destination: dest, path: "/slow", interface: "org.example.Slow",
                                          member: "Sleep", timeout: .milliseconds(200))
                return nil
            } catch {
                return error
            }
        }
        // Ended by the call's own timeout: the handler answers only after this.
        callEnded.signal()
        #expect(error?.isTimeout == true)
        // The connection still works after a timeout.
        let names = try await pair.client.call(destination: DBusNames.bus, path: DBusNames.busPath,
                                               interface: DBusNames.bus, member: "ListNames", timeout: .seconds(5))
        #expect(names.first?.stringArray?.contains(pair.server.uniqueName) == true)
        await pair.close()
    }

    @Test func cancellingTheTaskAbandonsTheCall() async throws {
        let pair = try await BusPair()
        let received = TestEvent()
        let callEnded = TestEvent()
        try await pair.server.export(path: "/slow", interfaces: [
            DBusInterface("org.example.Slow", methods: [
                DBusMethod("Sleep") { _ in
                    received.signal()
                    try await callEnded.wait()
                    return []
                },
            ]),
        ])
        let client = pair.client
        let dest = pair.server.uniqueName
        let task = Task {
            try await client.call(destination: dest, path: "/slow", interface: "org.example.Slow", member: "Sleep",
                                  timeout: .seconds(30))
        }
        // Cancelled while the call is at the server, unanswered.
        try await withTimeout(20) { try await received.wait() }
        task.cancel()
        defer { callEnded.signal() }
        let result = await task.result
        guard case .failure(let error as DBusError) = result else {
            Issue.record("expected a DBusError, got \(result)")
            await pair.close()
            return
        }
        #expect(error.name == .cancelled)
        await pair.close()
    }

    @Test func signalsArriveInOrderAndOnlyWhenMatching() async throws {
        let pair = try await BusPair()
        let stream = try await pair.client.subscribe(MatchRule(
            interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
            pathNamespace: "/org/bluez/hci0", arguments: [0: "org.bluez.GattCharacteristic1"]))
        let count = 500
        for i in 0..<count {
            try await pair.server.emitSignal(
                path: "/org/bluez/hci0/dev_AA/service0010/char0011", interface: "org.freedesktop.DBus.Properties",
                member: "PropertiesChanged",
                arguments: [.string("org.bluez.GattCharacteristic1"), .vardict(["Value": .bytes([UInt8(i & 0xFF), UInt8(i >> 8)])]), .strings([])])
            if i % 100 == 0 {
                // Not matching: other interface argument, other path.
                try await pair.server.emitSignal(
                    path: "/org/bluez/hci0/dev_AA", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                    arguments: [.string("org.bluez.Device1"), .vardict(["RSSI": .int16(-50)]), .strings([])])
                try await pair.server.emitSignal(
                    path: "/org/other", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                    arguments: [.string("org.bluez.GattCharacteristic1"), .vardict([:]), .strings([])])
            }
        }
        let received = try await withTimeout(20) {
            var values: [Int] = []
            for await message in stream {
                guard let bytes = message.body[1].vardict?["Value"]?.bytes, bytes.count == 2 else { continue }
                values.append(Int(bytes[0]) | Int(bytes[1]) << 8)
                if values.count == count { break }
            }
            return values
        }
        #expect(received == Array(0..<count))
        await pair.close()
    }

    @Test func batchEndFollowsEveryPassThatDeliveredMessages() async throws {
        let pair = try await BusPair()
        // (messages delivered, messages delivered when the last pass ended, passes ended)
        let state = Mutex<(seen: Int, atLastEnd: Int, ends: Int)>((0, 0, 0))
        let rule = MatchRule(interface: "org.example.Tick", member: "Tick")
        let subscription = try await pair.client.subscribe([rule], onMessage: { _ in
            state.withLock { $0.seen += 1 }
        }, onBatchEnd: {
            state.withLock { s in
                // A pass ends only after it delivered something new.
                if s.seen == s.atLastEnd { s.ends = -1_000 }
                s.atLastEnd = s.seen
                s.ends += 1
            }
        }, onEnd: {})
        for n in UInt32(0)..<200 {
            try await pair.server.emitSignal(path: "/t", interface: "org.example.Tick", member: "Tick", arguments: [.uint32(n)])
        }
        try #require(await waitUntil(20) { state.withLock { $0.atLastEnd } >= 200 })
        let final = state.withLock { $0 }
        #expect(final.seen == 200)
        #expect(final.atLastEnd == 200)
        #expect((1...200).contains(final.ends))
        subscription.cancel()
        await pair.close()
    }

    @Test func callbackSubscriptionAndLocalFilter() async throws {
        let pair = try await BusPair()
        let seen = Mutex<[UInt32]>([])
        let ended = Mutex(false)
        let rule = MatchRule(interface: "org.example.Tick", member: "Tick")
        let subscription = try await pair.client.subscribe([rule], onMessage: { message in
            if let n = message.body.first?.uint32 { seen.withLock { $0.append(n) } }
        }, onEnd: { ended.withLock { $0 = true } })
        let evenOnly = try await pair.client.subscribe([rule], where: { ($0.body.first?.uint32 ?? 1) % 2 == 0 })
        for n in UInt32(0)..<10 {
            try await pair.server.emitSignal(path: "/t", interface: "org.example.Tick", member: "Tick", arguments: [.uint32(n)])
        }
        let evens = try await withTimeout(5) { () -> [UInt32] in
            var out: [UInt32] = []
            for await m in evenOnly {
                out.append(m.body.first?.uint32 ?? 99)
                if out.count == 5 { break }
            }
            return out
        }
        #expect(evens == [0, 2, 4, 6, 8])
        try #require(await waitUntil(20) { seen.withLock { $0.count } >= 10 })
        #expect(seen.withLock { $0 } == Array(0..<10))
        subscription.cancel()
        try #require(await waitUntil(20) { ended.withLock { $0 } })
        try await pair.server.emitSignal(path: "/t", interface: "org.example.Tick", member: "Tick", arguments: [.uint32(10)])
        _ = try await pair.client.call(destination: DBusNames.bus, path: DBusNames.busPath, interface: DBusNames.bus,
                                       member: "GetId", timeout: .seconds(5))
        #expect(seen.withLock { $0.count } == 10)
        await pair.close()
    }

    @Test func directedSignalReachesOnlyItsDestination() async throws {
        let bus = try await PrivateBus.start()
        let sender = try await DBusConnection.connect(address: bus.address)
        let a = try await DBusConnection.connect(address: bus.address)
        let b = try await DBusConnection.connect(address: bus.address)
        let rule = MatchRule(interface: "org.example.Ping", member: "Ping")
        let streamA = try await a.subscribe(rule)
        let streamB = try await b.subscribe(rule)
        try await sender.emitSignal(path: "/p", interface: "org.example.Ping", member: "Ping",
                                    arguments: [.string("to a")], destination: a.uniqueName)
        try await sender.emitSignal(path: "/p", interface: "org.example.Ping", member: "Ping",
                                    arguments: [.string("to all")])
        let firstA = try await withTimeout(5) { () -> [String] in
            var out: [String] = []
            for await m in streamA {
                out.append(m.body.first?.string ?? "")
                if out.count == 2 { break }
            }
            return out
        }
        let firstB = try await withTimeout(5) { () -> String? in
            for await m in streamB { return m.body.first?.string }
            return nil
        }
        #expect(firstA == ["to a", "to all"])
        #expect(firstB == "to all")
        #expect(await a.isConnected)
        await a.close()
        await b.close()
        await sender.close()
        bus.close()
    }

    @Test func handlerCanCallBackIntoTheCallerWhileTheCallIsPending() async throws {
        // The shape of BlueZ pairing: the client's Pair is pending while the server calls the client's
        // agent, and replies only after the agent answered.
        let pair = try await BusPair()
        let server = pair.server
        try await pair.client.export(path: "/agent", interfaces: [
            DBusInterface("org.bluez.Agent1", methods: [
                DBusMethod("RequestPasskey", in: "o", out: "u") { call in
                    #expect(call.arguments == [.objectPath("/org/bluez/hci0/dev_AA")])
                    return [.uint32(123_456)]
                },
            ]),
        ])
        try await server.export(path: "/org/bluez/hci0/dev_AA", interfaces: [
            DBusInterface("org.bluez.Device1", methods: [
                DBusMethod("Pair") { call in
                    let answer = try await server.call(
                        destination: call.sender, path: "/agent", interface: "org.bluez.Agent1",
                        member: "RequestPasskey", arguments: [.objectPath("/org/bluez/hci0/dev_AA")], timeout: .seconds(5))
                    guard answer.first?.uint32 == 123_456 else {
                        throw DBusError(name: "org.bluez.Error.AuthenticationFailed", message: "wrong passkey")
                    }
                    return []
                },
            ]),
        ])
        let reply = try await pair.client.call(destination: server.uniqueName, path: "/org/bluez/hci0/dev_AA",
                                               interface: "org.bluez.Device1", member: "Pair", timeout: .seconds(10))
        #expect(reply.isEmpty)
        await pair.close()
    }

    @Test func propertiesAndObjectManager() async throws {
        let pair = try await BusPair()
        let server = pair.server
        let client = pair.client
        try await server.exportObjectManager(at: "/")
        let added = try await client.subscribe(MatchRule(sender: server.uniqueName, interface: DBusNames.objectManager))
        let changed = try await client.subscribe(MatchRule(interface: DBusNames.properties, member: "PropertiesChanged"))
        try await server.export(path: "/org/bluez/hci0", interfaces: [
            DBusInterface("org.bluez.Adapter1", properties: ["Powered": .bool(false), "Address": .string("00:11:22:33:44:55")],
                          writableProperties: ["Powered"]) { name, value, _ in
                guard name == "Powered", value.bool != nil else { throw DBusError(.invalidArgs, "bad value") }
            },
        ])
        let dest = server.uniqueName
        let objects = try await client.call(destination: dest, path: "/", interface: DBusNames.objectManager,
                                            member: "GetManagedObjects", timeout: .seconds(5))
        #expect(objects.first?.managedObjects?["/org/bluez/hci0"]?["org.bluez.Adapter1"]?["Address"] == .string("00:11:22:33:44:55"))
        let got = try await client.call(destination: dest, path: "/org/bluez/hci0", interface: DBusNames.properties,
                                        member: "Get", arguments: [.string("org.bluez.Adapter1"), .string("Powered")], timeout: .seconds(5))
        #expect(got == [.variant(.bool(false))])
        _ = try await client.call(destination: dest, path: "/org/bluez/hci0", interface: DBusNames.properties, member: "Set",
                                  arguments: [.string("org.bluez.Adapter1"), .string("Powered"), .variant(.bool(true))], timeout: .seconds(5))
        let all = try await client.call(destination: dest, path: "/org/bluez/hci0", interface: DBusNames.properties,
                                        member: "GetAll", arguments: [.string("org.bluez.Adapter1")], timeout: .seconds(5))
        #expect(all.first?.vardict?["Powered"] == .bool(true))
        let readOnly = await #expect(throws: DBusError.self) {
            try await client.call(destination: dest, path: "/org/bluez/hci0", interface: DBusNames.properties, member: "Set",
                                  arguments: [.string("org.bluez.Adapter1"), .string("Address"), .variant(.string("x"))], timeout: .seconds(5))
        }
        #expect(readOnly?.name == .propertyReadOnly)
        await server.setProperties(path: "/org/bluez/hci0", interface: "org.bluez.Adapter1", ["Powered": .bool(false)])
        await server.unexport(path: "/org/bluez/hci0")

        let signals = try await withTimeout(5) { () -> [String] in
            var out: [String] = []
            for await m in added {
                out.append("\(m.member ?? "") \(m.body.first?.objectPath ?? "")")
                if out.count == 2 { break }
            }
            return out
        }
        #expect(signals == ["InterfacesAdded /org/bluez/hci0", "InterfacesRemoved /org/bluez/hci0"])
        let changes = try await withTimeout(5) { () -> [Bool] in
            var out: [Bool] = []
            for await m in changed {
                if let powered = m.body[1].vardict?["Powered"]?.bool { out.append(powered) }
                if out.count == 2 { break }
            }
            return out
        }
        #expect(changes == [true, false])
        let introspection = try await client.call(destination: dest, path: "/", interface: DBusNames.introspectable,
                                                  member: "Introspect", timeout: .seconds(5))
        #expect(introspection.first?.string?.contains(DBusNames.objectManager) == true)
        await pair.close()
    }

    @Test func requestAndReleaseNames() async throws {
        let pair = try await BusPair()
        let owners = try await pair.client.nameOwnerChanges(of: "org.bluez")
        #expect(try await pair.server.requestName("org.bluez") == .primaryOwner)
        #expect(try await pair.server.requestName("org.bluez") == .alreadyOwner)
        #expect(try await pair.client.requestName("org.bluez", flags: [.doNotQueue]) == .exists)
        #expect(try await pair.client.nameOwner(of: "org.bluez") == pair.server.uniqueName)
        try await pair.server.releaseName("org.bluez")
        #expect(try await pair.client.nameOwner(of: "org.bluez") == nil)
        let seen = try await withTimeout(5) { () -> [String] in
            var out: [String] = []
            for await change in owners {
                out.append(change.new)
                if out.count == 2 { break }
            }
            return out
        }
        #expect(seen == [pair.server.uniqueName, ""])
        await pair.close()
    }

    @Test func busLossIsAnEventNotAnExit() async throws {
        let pair = try await BusPair()
        let received = TestEvent()
        try await pair.server.export(path: "/slow", interfaces: [
            DBusInterface("org.example.Slow", methods: [
                DBusMethod("Sleep") { _ in
                    received.signal()
                    try await Task.sleep(for: .seconds(30))
                    return []
                },
            ]),
        ])
        let client = pair.client
        let dest = pair.server.uniqueName
        let stream = try await client.subscribe(MatchRule(interface: "org.example.Nothing"))
        let lost = client.disconnectEvents()
        let pending = Task {
            try await client.call(destination: dest, path: "/slow", interface: "org.example.Slow", member: "Sleep",
                                  timeout: .seconds(60))
        }
        // The bus goes while the call is at the server, unanswered.
        try await withTimeout(20) { try await received.wait() }
        pair.bus.kill()
        try await withTimeout(10) {
            for await _ in lost { break }
            for await _ in stream {}
        }
        let result = await pending.result
        guard case .failure(let error as DBusError) = result else {
            Issue.record("expected a DBusError, got \(result)")
            await pair.close()
            return
        }
        #expect(error.isDisconnected || error.isTimeout)
        #expect(await client.isConnected == false)
        let after = await #expect(throws: DBusError.self) {
            try await client.call(destination: dest, path: "/", interface: nil, member: "X", timeout: .seconds(1))
        }
        #expect(after?.name == .disconnected)
        // A watcher added after the loss fires at once.
        try await withTimeout(5) { await client.waitForDisconnect() }
        await pair.close()
    }

    @Test func systemBusHonoursTheEnvironment() async throws {
        let bus = try await PrivateBus.start()
        setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.address, 1)
        #expect(DBusConnection.systemBusAddress == bus.address)
        let connection = try await DBusConnection.system()
        #expect(connection.uniqueName.hasPrefix(":"))
        await connection.close()
        bus.close()
        let error = await #expect(throws: DBusError.self) { try await DBusConnection.connect(address: bus.address) }
        #expect(error != nil)
    }
}
