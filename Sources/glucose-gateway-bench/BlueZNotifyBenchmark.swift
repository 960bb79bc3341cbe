#if canImport(Glibc)
import Glibc
#endif
import BlueZ
import Dispatch
import DBusKit
import GatewayCore

/// `bluez-notify`: notifications per second carried through D-Bus into a meter link's event stream, the
/// client's CPU seconds per 1,000 notifications, and the wake-ups per minute of a connected idle client.
///
/// A private dbus-daemon is started (unless `--address` is given) and a child process of this binary
/// (`bluez-notify-peer`) plays bluetoothd: a connected device with a resolved Glucose Measurement
/// characteristic that emits bursts of `PropertiesChanged` on request. Only the parent (the client) is
/// measured.
enum BlueZNotifyBenchmark {
    static let address = "AA:BB:CC:DD:EE:01"
    static let devicePath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01"
    static let characteristicPath = devicePath + "/service0010/char0011"

    static func run(_ arguments: [String]) async -> Int32 {
        var count = 20_000
        var idleSeconds = 60
        var settleSeconds = 10
        var busAddress: String?
        var index = 0
        while index < arguments.count {
            let value = index + 1 < arguments.count ? arguments[index + 1] : ""
            switch arguments[index] {
            case "--count": count = Int(value) ?? count
            case "--idle": idleSeconds = Int(value) ?? idleSeconds
            case "--settle": settleSeconds = Int(value) ?? settleSeconds
            case "--address": busAddress = value
            default:
                print("usage: glucose-gateway-bench bluez-notify [--count N] [--idle SECONDS] [--settle SECONDS] [--address BUS]")
                return 64
            }
            index += 2
        }
        var daemon: pid_t = 0
        var directory = ""
        if busAddress == nil {
            guard let started = startBus() else {
                print("cannot start dbus-daemon")
                return 1
            }
            (busAddress, daemon, directory) = (started.address, started.pid, started.directory)
        }
        guard let busAddress else { return 1 }
        defer {
            if daemon > 0 { stop(daemon) }
            if !directory.isEmpty {
                unlink(directory + "/bus.conf")
                rmdir(directory)
            }
        }
        guard let peer = spawn(["bluez-notify-peer", busAddress]) else {
            print("cannot start the BlueZ peer")
            return 1
        }
        defer { stop(peer) }
        do {
            return try await measure(busAddress: busAddress, count: count, idleSeconds: idleSeconds, settleSeconds: settleSeconds)
        } catch {
            print("benchmark failed: \(error)")
            return 1
        }
    }

    private static func measure(busAddress: String, count: Int, idleSeconds: Int, settleSeconds: Int) async throws -> Int32 {
        // Baseline: this process idle without a client. libdispatch on Linux runs a 1 Hz workqueue monitor
        // timer on its manager thread in any process that used worker threads; that floor is not the client's.
        await idle(seconds: settleSeconds)
        let baselineBefore = contextSwitches()
        await idle(seconds: idleSeconds)
        let baseline = contextSwitches() - baselineBefore

        let client = try await BlueZClient.connect(bus: busAddress)
        _ = try await client.waitForDevice(address: address, timeout: .seconds(10))
        let link = try await client.connectMeter(address: address, timeout: .seconds(10))
        try await link.subscribe(.glucoseMeasurement)
        let connection = client.connection

        // Warm-up burst.
        try await burst(connection, 1_000, link: link)

        let cpuBefore = cpuSeconds()
        let start = ContinuousClock.now
        try await burst(connection, count, link: link)
        let wall = ContinuousClock.now - start
        let cpu = cpuSeconds() - cpuBefore
        let wallSeconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
        print("notifications: \(count)")
        print("notifications per second: \(Int(Double(count) / wallSeconds))")
        print("client CPU seconds per 1000 notifications: \(format(cpu / Double(count) * 1000))")

        // Let idle worker threads of the burst retire first: that is teardown, not idling.
        await idle(seconds: settleSeconds)
        let switchesBefore = contextSwitches()
        await idle(seconds: idleSeconds)
        let switches = contextSwitches() - switchesBefore
        let perMinute = 60 / Double(idleSeconds)
        print("idle \(idleSeconds) s, context switches of all threads: without client \(baseline), "
            + "with a connected subscribed client \(switches)")
        print("idle wake-ups per minute: process floor \(format(Double(baseline) * perMinute)), "
            + "with client \(format(Double(switches) * perMinute)), "
            + "attributable to the client \(format(Double(switches - baseline) * perMinute))")
        await link.disconnect()
        await client.close()
        return 0
    }

    /// Asks the peer for `count` notifications and waits until the link has delivered all of them in order.
    private static func burst(_ connection: DBusConnection, _ count: Int, link: BlueZMeterLink) async throws {
        async let request = connection.call(destination: "org.bluez", path: "/bench", interface: "org.example.Bench",
                                            member: "Burst", arguments: [.uint32(UInt32(count))], timeout: .seconds(600))
        var received = 0
        for await event in link.events {
            guard case .value(_, let bytes) = event, bytes.count == 4 else { continue }
            let sequence = Int(bytes[0]) | Int(bytes[1]) << 8 | Int(bytes[2]) << 16 | Int(bytes[3]) << 24
            guard sequence == received else {
                throw BlueZError(.permanent, "notification \(sequence) arrived when \(received) was expected")
            }
            received += 1
            if received == count { break }
        }
        _ = try await request
    }

    // MARK: - The BlueZ peer (child process)

    static func peer(_ arguments: [String]) async -> Int32 {
        guard let busAddress = arguments.first else { return 64 }
        do {
            let connection = try await DBusConnection.connect(address: busAddress)
            try await connection.exportObjectManager(at: "/")
            try await connection.export(path: "/org/bluez/hci0", interfaces: [
                DBusInterface("org.bluez.Adapter1", properties: ["Powered": .bool(true), "Address": .string("00:11:22:33:44:55")]),
            ])
            try await connection.export(path: devicePath, interfaces: [
                DBusInterface("org.bluez.Device1", methods: [DBusMethod("Disconnect") { _ in [] }], properties: [
                    "Address": .string(address), "Connected": .bool(true), "ServicesResolved": .bool(true),
                    "Paired": .bool(true), "UUIDs": .strings([GATTUUID.glucoseService.uuidString]),
                    "Adapter": .objectPath("/org/bluez/hci0"),
                ]),
            ])
            try await connection.export(path: devicePath + "/service0010", interfaces: [
                DBusInterface("org.bluez.GattService1", properties: ["UUID": .string(GATTUUID.glucoseService.uuidString)]),
            ])
            try await connection.export(path: characteristicPath, interfaces: [
                DBusInterface("org.bluez.GattCharacteristic1", methods: [
                    DBusMethod("StartNotify") { _ in [] },
                    DBusMethod("StopNotify") { _ in [] },
                ], properties: [
                    "UUID": .string(GATTUUID.glucoseMeasurement.uuidString), "Value": .bytes([]),
                    "Flags": .strings(["notify"]),
                ]),
            ])
            try await connection.export(path: "/bench", interfaces: [
                DBusInterface("org.example.Bench", methods: [
                    DBusMethod("Burst", in: "u") { call in
                        let n = Int(call.arguments.first?.uint32 ?? 0)
                        for i in 0..<n {
                            let value: [UInt8] = [UInt8(i & 0xFF), UInt8((i >> 8) & 0xFF), UInt8((i >> 16) & 0xFF), UInt8((i >> 24) & 0xFF)]
                            try await connection.emitSignal(
                                path: characteristicPath, interface: DBusNames.properties, member: "PropertiesChanged",
                                arguments: [.string("org.bluez.GattCharacteristic1"), .vardict(["Value": .bytes(value)]), .strings([])])
                        }
                        return []
                    },
                ]),
            ])
            _ = try await connection.requestName("org.bluez")
            await connection.waitForDisconnect()
            return 0
        } catch {
            print("peer failed: \(error)")
            return 1
        }
    }

    // MARK: - Processes and measurements

    /// Waits on a one-shot Dispatch timer. `Task.sleep` is not used: on this toolchain it re-arms a timer
    /// every second while sleeping, which would count as wake-ups of the client.
    private static func idle(seconds: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(seconds)) { continuation.resume() }
        }
    }

    private static func format(_ value: Double) -> String {
        let scaled = (value * 10_000).rounded() / 10_000
        return "\(scaled)"
    }

    private static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }

    /// Voluntary plus involuntary context switches of every thread of this process, exited ones included.
    private static func contextSwitches() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Int(usage.ru_nvcsw) + Int(usage.ru_nivcsw)
    }

    private static func startBus() -> (address: String, pid: pid_t, directory: String)? {
        var template = Array("/tmp/gg-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { return nil }
        let directory = String(cString: made)
        let socketPath = directory + "/bus.sock"
        let config = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig><type>system</type><listen>unix:path=\(socketPath)</listen><auth>EXTERNAL</auth>
        <policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/>
        <allow send_type="method_call"/><allow send_type="signal"/><allow send_type="method_return"/>
        <allow send_type="error"/><allow receive_type="method_call"/><allow receive_type="signal"/>
        <allow receive_type="method_return"/><allow receive_type="error"/></policy>
        <limit name="max_replies_per_connection">100000</limit></busconfig>
        """
        guard let file = fopen(directory + "/bus.conf", "w") else { return nil }
        fputs(config, file)
        fclose(file)
        guard let pid = spawn(["--nofork", "--nopidfile", "--config-file=" + directory + "/bus.conf"], executable: "dbus-daemon") else {
            return nil
        }
        for _ in 0..<500 {
            if access(socketPath, F_OK) == 0 {
                usleep(50_000)
                return ("unix:path=" + socketPath, pid, directory)
            }
            usleep(10_000)
        }
        stop(pid)
        return nil
    }

    /// Starts `executable` (this binary when nil) with a clean signal mask; returns its pid.
    private static func spawn(_ arguments: [String], executable: String? = nil) -> pid_t? {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGTERM)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let program = executable ?? "/proc/self/exe"
        var argv: [UnsafeMutablePointer<CChar>?] = ([program] + arguments).map { strdup($0) } + [nil]
        defer { for arg in argv { free(arg) } }
        var pid: pid_t = 0
        let status = posix_spawnp(&pid, program, nil, &attributes, &argv, environ)
        return status == 0 ? pid : nil
    }

    private static func stop(_ pid: pid_t) {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        for _ in 0..<200 {
            if waitpid(pid, &status, WNOHANG) != 0 { return }
            usleep(10_000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
    }
}

