import DBusKit

/// Bluetooth as `status` reports it: bluetoothd on the system bus, whether it answers, and the adapter.
/// Two calls of its own, each with a short timeout, rather than a `BlueZClient` and its mirror: a bluetoothd
/// that holds `org.bluez` and answers nothing is reported within seconds.
public struct BluetoothStatus: Sendable {
    /// False when the system bus itself cannot be reached.
    public var busReachable = false
    public var bluetoothdRunning = false
    /// False when bluetoothd holds org.bluez but gave no reply in time.
    public var bluetoothdAnswering = true
    public var adapter: String?
    public var address: String?
    public var powered = false
    public var powerState: String?
    public var discovering = false
    public var error: String?

    public init() {}

    /// How long bluetoothd gets to answer.
    public static let answerSeconds = 3

    /// Asks bluetoothd on the system bus (`DBUS_SYSTEM_BUS_ADDRESS` when set) about the adapter named
    /// `wanted` (a name such as `hci0` or an address), or the first powered one.
    public static func read(adapter wanted: String?) async -> BluetoothStatus {
        var status = BluetoothStatus()
        let connection: DBusConnection
        do {
            connection = try await DBusConnection.system()
        } catch {
            status.error = "system bus not reachable: \(error.message)"
            return status
        }
        status.busReachable = true
        await query(connection, wanted: wanted, into: &status)
        await connection.close()
        return status
    }

    private static func query(_ connection: DBusConnection, wanted: String?, into status: inout BluetoothStatus) async {
        do {
            guard let owner = try await connection.nameOwner(of: BlueZNames.service, timeout: .seconds(3)) else {
                status.error = "bluetoothd is not running"
                return
            }
            status.bluetoothdRunning = true
            let reply = try await connection.call(destination: owner, path: "/", interface: DBusNames.objectManager,
                                                  member: "GetManagedObjects", timeout: .seconds(answerSeconds))
            let tree = reply.first?.managedObjects ?? [:]
            var adapters: [(name: String, properties: [String: DBusValue])] = []
            for path in tree.keys.sorted() {
                guard let properties = tree[path]?[BlueZNames.adapter] else { continue }
                adapters.append((String(path.split(separator: "/").last ?? ""), properties))
            }
            let candidates = wanted.map { w in adapters.filter { $0.name == w || $0.properties["Address"]?.string == w } } ?? adapters
            let chosen = candidates.first { $0.properties["Powered"]?.bool == true } ?? candidates.first
            if let chosen {
                status.adapter = chosen.name
                status.address = chosen.properties["Address"]?.string
                status.powered = chosen.properties["Powered"]?.bool ?? false
                status.powerState = chosen.properties["PowerState"]?.string
                status.discovering = chosen.properties["Discovering"]?.bool ?? false
            } else {
                status.error = wanted.map { "no adapter \($0)" } ?? "no Bluetooth adapter"
            }
        } catch where status.bluetoothdRunning && error.isTimeout {
            status.bluetoothdAnswering = false
            status.error = "bluetoothd not answering (it holds org.bluez but gave no reply within \(answerSeconds) s; restart it: systemctl restart bluetooth)"
        } catch {
            status.error = "bluetoothd did not answer: \(error.message)"
        }
    }
}
