import DBusKit
import Dispatch
import GatewayCore
import Support
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// NetworkManager's view, over D-Bus: `State` 70 (`NM_STATE_CONNECTED_GLOBAL`) or `Connectivity` 4
/// (`NM_CONNECTIVITY_FULL`) is up; a lower state, or connectivity none, portal or limited, is down.
public enum NetworkManagerState {
    public static let busName = "org.freedesktop.NetworkManager"
    public static let path = "/org/freedesktop/NetworkManager"
    public static let interface = "org.freedesktop.NetworkManager"

    public static func fromState(_ state: UInt32) -> Connectivity {
        switch state {
        case 70: .up
        case 10...60: .down
        default: .unknown
        }
    }

    public static func fromConnectivity(_ value: UInt32) -> Connectivity {
        switch value {
        case 4: .up
        case 1, 2, 3: .down
        default: .unknown
        }
    }

    /// Feeds `hub` from NetworkManager until the task is cancelled or the bus goes away. Returns at once
    /// (leaving the hub untouched) when NetworkManager is not on the bus.
    public static func watch(connection: DBusConnection, hub: ConnectivityHub, logger: Logger) async {
        let stateRule = MatchRule(sender: busName, interface: interface, member: "StateChanged", path: path)
        let propsRule = MatchRule(sender: busName, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                                  path: path, arguments: [0: interface])
        guard let states = try? await connection.subscribe(stateRule),
              let props = try? await connection.subscribe(propsRule) else { return }
        guard (try? await connection.nameOwner(of: busName)) ?? nil != nil else {
            logger.debug("NetworkManager is not on the bus; connectivity from routes and probes only")
            return
        }
        if let reply = try? await connection.call(destination: busName, path: path, interface: "org.freedesktop.DBus.Properties",
                                                  member: "GetAll", arguments: [.string(interface)], timeout: .seconds(5)),
           let all = reply.first?.vardict {
            if let c = all["Connectivity"]?.uint32, fromConnectivity(c) != .unknown {
                hub.report(fromConnectivity(c), source: "networkmanager")
            } else if let s = all["State"]?.uint32 {
                hub.report(fromState(s), source: "networkmanager")
            }
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await message in states {
                    if let s = message.body.first?.uint32 {
                        let c = fromState(s)
                        logger.debug("NetworkManager state \(s)")
                        if c != .unknown { hub.report(c, source: "networkmanager") }
                    }
                }
            }
            group.addTask {
                for await message in props {
                    guard message.body.count >= 2, let changed = message.body[1].vardict else { continue }
                    if let value = changed["Connectivity"]?.uint32 {
                        let c = fromConnectivity(value)
                        logger.debug("NetworkManager connectivity \(value)")
                        if c != .unknown { hub.report(c, source: "networkmanager") }
                    } else if let value = changed["State"]?.uint32 {
                        let c = fromState(value)
                        if c != .unknown { hub.report(c, source: "networkmanager") }
                    }
                }
            }
        }
    }
}

/// Default routes from `/proc/self/net/route` and `/proc/self/net/ipv6_route`, and netlink route events.
/// Read through `/proc/self`: the same tables as `/proc/net`, which a `/proc` mounted `subset=pid` (the
/// unit's `ProcSubset=pid`) does not show.
public enum RouteTable {
    /// True when an IPv4 or IPv6 default route exists on an interface other than `lo`.
    public static func hasDefaultRoute(ipv4: String, ipv6: String) -> Bool {
        for line in ipv4.split(separator: "\n").dropFirst() {
            let f = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if f.count >= 8, f[0] != "lo", f[1] == "00000000", f[7] == "00000000" { return true }
        }
        for line in ipv6.split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            // dest, dest prefix length, ..., flags (index 8), ..., interface (index 9)
            guard f.count >= 10, f[9] != "lo", f[1] == "00", f[0].allSatisfy({ $0 == "0" }) else { continue }
            if let flags = UInt32(f[8], radix: 16), flags & 0x0200 == 0 { return true }  // not RTF_REJECT
        }
        return false
    }

    public static func current() -> Connectivity {
        let v4 = readFile("/proc/self/net/route") ?? ""
        let v6 = readFile("/proc/self/net/ipv6_route") ?? ""
        if v4.isEmpty && v6.isEmpty { return .unknown }
        return hasDefaultRoute(ipv4: v4, ipv6: v6) ? .up : .down
    }

    /// The route-change kinds found in a netlink datagram: (added, dst prefix length) per message.
    public static func routeChanges(_ bytes: [UInt8]) -> [(added: Bool, prefixLength: Int)] {
        var out: [(Bool, Int)] = []
        var offset = 0
        while offset + 16 <= bytes.count {
            let length = Int(bytes[offset]) | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2]) << 16 | Int(bytes[offset + 3]) << 24
            let type = Int(bytes[offset + 4]) | Int(bytes[offset + 5]) << 8
            guard length >= 16, offset + length <= bytes.count else { break }
            if (type == 24 || type == 25), length >= 16 + 12 {  // RTM_NEWROUTE, RTM_DELROUTE; struct rtmsg
                let dstLength = Int(bytes[offset + 16 + 1])
                let table = bytes[offset + 16 + 4]
                if table == 254 { out.append((type == 24, dstLength)) }  // RT_TABLE_MAIN
            }
            offset += (length + 3) & ~3
        }
        return out
    }

    static func readFile(_ path: String) -> String? {
        FileContents.read(path, limit: 1 << 20).map { String(decoding: $0, as: UTF8.self) }
    }
}

/// Listens to rtnetlink route groups and reports default-route changes to a hub. Runs on its own
/// thread (a blocking socket with a one-second poll so `stop()` is honoured).
public final class NetlinkRouteWatcher: Sendable {
    private let stopped = Atomic<Bool>(false)
    private let hub: ConnectivityHub

    /// Nil when the socket cannot be opened (no netlink in this environment).
    public init?(hub: ConnectivityHub, logger: Logger) {
        self.hub = hub
        let fd = socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)  // NETLINK_ROUTE
        guard fd >= 0 else { return nil }
        // struct sockaddr_nl (linux/netlink.h, not exported by Glibc): family, pad, pid, groups.
        // Groups: RTMGRP_LINK | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE.
        var address: (UInt16, UInt16, UInt32, UInt32) = (UInt16(AF_NETLINK), 0, 0, 0x1 | 0x40 | 0x400)
        let bound = withUnsafeBytes(of: &address) { raw in
            bind(fd, raw.baseAddress?.assumingMemoryBound(to: sockaddr.self), socklen_t(12))
        }
        guard bound == 0 else {
            close(fd)
            return nil
        }
        hub.report(RouteTable.current(), source: "netlink")
        let socketFD = fd
        DispatchQueue(label: "glucose-gateway.netlink").async { [self] in
            defer { close(socketFD) }
            var buffer = [UInt8](repeating: 0, count: 16_384)
            while !stopped.load(ordering: .relaxed) {
                var pfd = pollfd(fd: socketFD, events: Int16(POLLIN), revents: 0)
                let ready = poll(&pfd, 1, 1000)
                if ready <= 0 { continue }
                let n = buffer.withUnsafeMutableBytes { recv(socketFD, $0.baseAddress, $0.count, 0) }
                if n <= 0 { continue }
                let changes = RouteTable.routeChanges(Array(buffer[0..<n]))
                if changes.contains(where: { $0.added && $0.prefixLength == 0 }) {
                    logger.debug("default route added")
                    hub.report(.up, source: "netlink")
                } else if changes.contains(where: { !$0.added && $0.prefixLength == 0 }) {
                    hub.report(RouteTable.current(), source: "netlink")
                }
            }
        }
    }

    public func stop() { stopped.store(true, ordering: .relaxed) }
}
