import CPacketSocket
import DBusKit
import Dispatch
import GatewayCore
import Support
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The part of a meter link that signal delivery touches: runs on the D-Bus connection's queue (and from
/// the link's methods), so its state sits behind a mutex.
///
/// Values are collected while the connection dispatches what one wake-up read and handed to `events`
/// together at the end of that pass (``flush()``), as one group, so the consumer wakes once per pass, not
/// once per notification. Everything is handed on under the mutex, so the order (values, then the end)
/// holds whichever thread ends the link.
///
/// A characteristic whose notifications come through the socket of an `AcquireNotify` (``attach(_:descriptor:)``)
/// is read on the link's own queue, each wake-up taking every packet waiting. bluetoothd writes such a value
/// to the socket the moment it handles it, while a value it sends on the bus goes out later, from its
/// D-Bus queue: so every value that came before a signal is already in the socket when the signal
/// arrives, and the sockets are read dry before any value or end that comes over the bus is taken. The
/// order of the link's events is then the meter's, except between two sockets: bluetoothd writes while
/// the link reads, so a measurement's context can come before or after it (the download pairs them by
/// sequence number).
final class LinkCore: Sendable {
    let devicePath: String
    let owner: String
    let channel = MeterLinkEventChannel()
    let logger: Logger
    /// The clock the link's lifetime is measured on (`authenticationFailure`).
    let clock: any SessionClock
    /// Where the acquired sockets are read.
    private let socketQueue = DispatchQueue(label: "glucose-gateway.link-notifications")
    /// The largest value a socket packet may carry: an ATT attribute value is at most 512 bytes.
    static let largestValue = 512
    private struct State {
        var uuidByPath: [String: GATTUUID] = [:]
        /// The characteristic of the last notification: a burst comes from one or two, and comparing the
        /// path costs less than hashing it.
        var lastValue: (path: String, uuid: GATTUUID)?
        var subscribed: Set<GATTUUID> = []
        var ended = false
        /// A request to report records was written and no RACP indication has come since: the meter is
        /// sending a burst of records, so the connection may gather them (`isReporting`).
        var reporting = false
        /// Values of the current dispatch pass, not yet yielded.
        var batch: [MeterLinkEvent] = []
        /// When this link was signalled up and down, and the reason bluetoothd gave (5.83+).
        var upAt: ContinuousClock.Instant?
        var downAt: ContinuousClock.Instant?
        var disconnectReason: String?
        /// The sockets of acquired notifications, in order of UUID.
        var acquired: [AcquiredSocket] = []
    }
    private let state = Mutex(State())

    /// One characteristic's notification socket and its read source (the source closes the descriptor
    /// when cancelled).
    struct AcquiredSocket: Sendable {
        let uuid: GATTUUID
        let descriptor: Int32
        let source: ReadSource
    }

    /// A dispatch read source, whose methods may be called from any thread.
    final class ReadSource: @unchecked Sendable {
        private let source: any DispatchSourceRead

        init(descriptor: Int32, queue: DispatchQueue, onReadable: @escaping @Sendable () -> Void) {
            source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
            source.setEventHandler(handler: onReadable)
            source.setCancelHandler { _ = Glibc.close(descriptor) }
        }

        func resume() { source.resume() }
        /// Stops reading; the descriptor is closed once the source has stopped.
        func cancel() { source.cancel() }
    }

    init(devicePath: String, owner: String, logger: Logger = .silent, clock: any SessionClock = ContinuousClock()) {
        self.devicePath = devicePath
        self.owner = owner
        self.logger = logger
        self.clock = clock
    }

    func setCharacteristics(_ paths: [String: String]) {
        var byPath: [String: GATTUUID] = [:]
        for (uuid, path) in paths {
            if let known = GATTUUID(string: uuid) ?? GATTUUID(vendor: uuid) { byPath[path] = known }
        }
        state.withLock { state in
            state.uuidByPath = byPath
            state.lastValue = nil
        }
    }

    func setSubscribed(_ uuid: GATTUUID, _ on: Bool) {
        state.withLock { state in
            if on { state.subscribed.insert(uuid) } else { state.subscribed.remove(uuid) }
        }
    }

    func takeSubscriptions() -> Set<GATTUUID> {
        state.withLock { state in
            let all = state.subscribed
            state.subscribed.removeAll()
            return all
        }
    }

    var isEnded: Bool { state.withLock { $0.ended } }

    /// Whether the meter is sending the records of a report (see `State.reporting`): the connection may
    /// then pause a moment to take in more of them per wake-up. The report's RACP response ends it, so
    /// that response waits at most one such pause.
    var isReporting: Bool { state.withLock { $0.reporting && !$0.ended } }

    /// Notes an RACP request about to be written (`writing`) or that failed (`!writing`).
    func racpRequest(_ value: [UInt8], writing: Bool) {
        // Op code 0x01: Report Stored Records. Every other request is answered by one indication.
        guard value.first == 0x01 else { return }
        state.withLock { $0.reporting = writing }
    }

    /// One signal, on the connection's queue.
    func handle(_ message: DBusMessage) {
        if message.interface == DBusNames.bus {
            guard message.body.count == 3, let new = message.body[2].string, new != owner else { return }
            end(new.isEmpty ? "bluetoothd stopped" : "bluetoothd restarted")
            return
        }
        guard message.sender == owner else { return }
        if message.member == "InterfacesRemoved" {
            guard message.body.count == 2, message.body[0].objectPath == devicePath,
                  message.body[1].stringArray?.contains(BlueZNames.device) == true else { return }
            end("the meter's device object was removed")
            return
        }
        if message.interface == BlueZNames.device, message.member == "Disconnected" {
            // Device1.Disconnected(s reason, s message), BlueZ 5.83+: sent before Connected=false.
            guard message.path == devicePath, let reason = message.body.first?.string else { return }
            state.withLock { $0.disconnectReason = reason }
            return
        }
        guard message.body.count >= 2, let interface = message.body[0].string, let path = message.path else { return }
        if interface == BlueZNames.gattCharacteristic {
            guard let value = message.body[1].property("Value")?.bytes else { return }
            take(value, from: path)
            return
        }
        if interface == BlueZNames.device, path == devicePath, let connected = message.body[1].property("Connected")?.bool {
            let at = clock.now
            state.withLock { state in
                if connected { state.upAt = at } else if state.downAt == nil { state.downAt = at }
            }
            if !connected { end("the meter disconnected") }
        }
    }

    /// A characteristic's new value: queued for the link when its characteristic is subscribed.
    private func take(_ value: [UInt8], from path: String) {
        let closed = state.withLock { state -> [AcquiredSocket] in
            guard !state.ended else { return [] }
            // What the sockets hold came before this value.
            let closed = drain(&state)
            let uuid: GATTUUID
            if let last = state.lastValue, last.path == path {
                uuid = last.uuid
            } else {
                guard let known = state.uuidByPath[path] else { return closed }
                uuid = known
                state.lastValue = (path, known)
            }
            guard state.subscribed.contains(uuid) else { return closed }
            if uuid == .recordAccessControlPoint { state.reporting = false }
            state.batch.append(.value(uuid, value))
            return closed
        }
        release(closed, hungUp: true)
    }

    /// Why this failed attempt looks like the meter refusing the encryption with the stored key, or nil.
    ///
    /// What the stack says when the meter forgot the bond (seen on BlueZ 5.66 with Linux 6.1: the
    /// bond-loss real-stack scenario): the kernel starts encryption with the stored key, the meter answers
    /// with a negative LTK reply, the controller reports Encryption Change with status 0x06 (PIN or Key
    /// Missing), and the kernel disconnects with 0x05 (Authentication Failure); mgmt reports Device
    /// Disconnected with reason 4 (authentication failure). bluetoothd keeps the key: `Paired` and
    /// `Bonded` stay true, and nothing is retried at ATT level (no 0x05/0x0F ATT errors: no request
    /// got that far). On D-Bus, 5.66 shows only `Connected` going true and false again within some
    /// 20-80 ms, with `ServicesResolved` never true; `Connect` itself either succeeds (bluetoothd
    /// attached ATT before raising security: "Elevating security level since LTK is available") or
    /// fails with `org.bluez.Error.Failed` "le-connection-abort-by-local" (the same text as any other
    /// local abort). BlueZ 5.83 added `Device1.Disconnected(reason, message)`; the reason is then
    /// `org.bluez.Reason.Authentication`, which the kernel reports only for that failure. bluetoothd's
    /// own reconnection (a GATT profile's auto-connect) is not re-armed by 5.66 when the ATT channel ends
    /// with EACCES, as it did on the emulated controller (`att_disconnected_cb` re-arms on ETIMEDOUT,
    /// ECONNRESET, ECONNABORTED); a controller that reports the local disconnect as 0x16 gives
    /// ECONNABORTED, which would re-arm it; 5.86+ retries after 1, 2 and 4 s, then stops. So: where
    /// bluetoothd gave a reason, only `Authentication` counts; where it gave none, a link that came up
    /// and was dropped within `within` (`ConnectRetry.refusedWithin`), before its services were
    /// resolved, does: encryption is the first thing a central does on a link to a bonded device. One
    /// such attempt proves nothing (a link can fail to establish, 0x3E); `connectMeter` wants three in a row.
    func authenticationFailure(within: Duration) -> String? {
        let now = clock.now
        let s = state.withLock { $0 }
        if let reason = s.disconnectReason {
            return reason == "org.bluez.Reason.Authentication" ? "bluetoothd: disconnected, reason \(reason)" : nil
        }
        guard let up = s.upAt else { return nil }
        let lasted = up.duration(to: s.downAt ?? now)
        guard lasted <= within else { return nil }
        return "the link was dropped \(lasted.wholeMilliseconds) ms after it came up, before its services were resolved"
    }

    /// Hands on the values of the dispatch pass that just ended.
    func flush() {
        state.withLock { state in
            guard !state.batch.isEmpty else { return }
            let group = state.batch
            state.batch = []
            channel.yield(group)
        }
    }

    func end(_ reason: String) {
        let sockets = state.withLock { state -> [AcquiredSocket] in
            guard !state.ended else { return [] }
            // Values that arrived before the end go first, those still in the sockets too.
            let closed = drain(&state)
            state.ended = true
            var group = state.batch
            state.batch = []
            group.append(.disconnected(reason: reason))
            channel.finish(after: group)
            let open = state.acquired
            state.acquired = []
            return closed + open
        }
        release(sockets, hungUp: false)
    }

    // MARK: - Acquired notifications

    /// Reads `uuid`'s notifications from `descriptor`, the socket an `AcquireNotify` returned, which the
    /// link owns from now on. False, with the descriptor closed, when the link has ended meanwhile.
    func attach(_ uuid: GATTUUID, descriptor: Int32) -> Bool {
        let source = ReadSource(descriptor: descriptor, queue: socketQueue) { [weak self] in self?.readSockets() }
        let attached = state.withLock { state -> Bool in
            guard !state.ended else { return false }
            state.acquired.append(AcquiredSocket(uuid: uuid, descriptor: descriptor, source: source))
            state.acquired.sort { $0.uuid.rawValue < $1.uuid.rawValue }
            return true
        }
        source.resume()
        if !attached { source.cancel() }
        return attached
    }

    /// Stops reading `uuid`'s socket and closes it, which ends its notifications in bluetoothd. False
    /// when `uuid`'s notifications do not come through a socket.
    @discardableResult
    func detach(_ uuid: GATTUUID) -> Bool {
        let socket = state.withLock { state -> AcquiredSocket? in
            guard let index = state.acquired.firstIndex(where: { $0.uuid == uuid }) else { return nil }
            return state.acquired.remove(at: index)
        }
        socket?.source.cancel()
        return socket != nil
    }

    /// Closes every acquired socket: the link is going away.
    func closeSockets() {
        let all = state.withLock { state -> [AcquiredSocket] in
            defer { state.acquired = [] }
            return state.acquired
        }
        release(all, hungUp: false)
    }

    /// Whether `uuid`'s notifications come through a socket.
    func isAcquired(_ uuid: GATTUUID) -> Bool {
        state.withLock { $0.acquired.contains { $0.uuid == uuid } }
    }

    /// A socket has packets (or was closed): every socket is read dry and what it held handed on as one
    /// group. While the meter sends a report's records, the read pauses `burstWindow` and reads again as
    /// long as the last read brought values, up to `burstBudget` in all, so that one wake-up of the
    /// consumer takes in many records (the bus's signals get the same: `BurstWait` in DBusKit). A burst
    /// that fills a socket meanwhile would lose values; at the pace of a Bluetooth LE link (at most a few
    /// values per 7.5 ms connection event) a socket holds a hundred times what arrives in one budget.
    private func readSockets() {
        let start = ContinuousClock.now
        var closed: [AcquiredSocket] = []
        while true {
            let (more, hungUp) = state.withLock { state -> (Bool, [AcquiredSocket]) in
                let before = state.batch.count
                let hungUp = drain(&state)
                return (state.batch.count > before && state.reporting && !state.ended, hungUp)
            }
            closed += hungUp
            guard more, ContinuousClock.now - start + Self.burstWindow <= Self.burstBudget else { break }
            Self.pause(Self.burstWindow)
        }
        flush()
        release(closed, hungUp: true)
    }

    static let burstWindow: Duration = .milliseconds(2)
    static let burstBudget: Duration = .milliseconds(8)

    private static func pause(_ duration: Duration) {
        var time = timespec(tv_sec: 0, tv_nsec: Int(duration.components.attoseconds / 1_000_000_000))
        var left = timespec()
        while nanosleep(&time, &left) != 0 && errno == EINTR { time = left }
    }

    /// Takes every packet waiting in the acquired sockets into the batch, socket by socket (in order of
    /// UUID), up to `GG_PACKETS_PER_CALL` packets per system call; returns, and forgets, the sockets
    /// bluetoothd closed. Values of a characteristic no longer subscribed, or of an ended link, are read
    /// and dropped. A packet longer than any attribute value is dropped and logged: it cannot be a value
    /// as the meter sent it.
    private func drain(_ state: inout State) -> [AcquiredSocket] {
        guard !state.acquired.isEmpty else { return [] }
        var closed: [AcquiredSocket] = []
        let slots = Int(GG_PACKETS_PER_CALL)
        let slot = Self.largestValue
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: slots * slot) { buffer in
            withUnsafeTemporaryAllocation(of: Int.self, capacity: slots) { lengths in
                withUnsafeTemporaryAllocation(of: UInt8.self, capacity: slots) { truncated in
                    guard let data = buffer.baseAddress, let lengthAt = lengths.baseAddress,
                          let truncatedAt = truncated.baseAddress else { return }
                    var index = 0
                    while index < state.acquired.count {
                        let socket = state.acquired[index]
                        var hungUp = false
                        while true {
                            let taken = gg_receive_packets(socket.descriptor, data, slot, UInt32(slots), lengthAt, truncatedAt)
                            if taken < 0 {
                                let error = errno
                                if error == EINTR { continue }
                                hungUp = error != EAGAIN && error != EWOULDBLOCK
                                break
                            }
                            var empty = false
                            for i in 0..<Int(taken) {
                                let length = lengths[i]
                                if truncated[i] != 0 {
                                    logger.warning("bluez: a \(length)-byte notification of \(socket.uuid) is longer than any attribute value; dropped")
                                    continue
                                }
                                guard length > 0 else {
                                    empty = true
                                    continue
                                }
                                guard !state.ended, state.subscribed.contains(socket.uuid) else { continue }
                                state.batch.append(.value(socket.uuid, Array(UnsafeBufferPointer(start: data + i * slot, count: length))))
                            }
                            // A zero length is an empty packet, or the end of the stream: the end when
                            // bluetoothd hung up and no bytes are left to read (empty packets left behind
                            // carry nothing).
                            if empty, Self.hungUp(socket.descriptor), Self.bytesQueued(socket.descriptor) == 0 {
                                hungUp = true
                                break
                            }
                            // Fewer than asked for: the socket was empty when the call returned.
                            if Int(taken) < slots { break }
                        }
                        if hungUp { closed.append(state.acquired.remove(at: index)) } else { index += 1 }
                    }
                }
            }
        }
        return closed
    }

    /// `POLLRDHUP` (Linux; the C headers show it only with `_GNU_SOURCE`).
    private static let pollReadHangUp: Int16 = 0x2000

    /// Whether the peer closed `descriptor`'s connection.
    private static func hungUp(_ descriptor: Int32) -> Bool {
        var entry = pollfd(fd: descriptor, events: pollReadHangUp, revents: 0)
        guard poll(&entry, 1, 0) == 1 else { return false }
        return entry.revents & (pollReadHangUp | Int16(POLLHUP) | Int16(POLLERR)) != 0
    }

    /// The bytes waiting in `descriptor`'s receive queue, all packets together (`SIOCINQ`).
    private static func bytesQueued(_ descriptor: Int32) -> Int32 {
        var count: Int32 = 0
        guard ioctl(descriptor, UInt(FIONREAD), &count) == 0 else { return 0 }
        return count
    }

    /// Cancels the read sources of sockets taken out of the link (closing them); `hungUp`: bluetoothd closed them.
    private func release(_ sockets: [AcquiredSocket], hungUp: Bool) {
        for socket in sockets {
            socket.source.cancel()
            if hungUp { logger.info("bluez: bluetoothd closed the notification socket of \(socket.uuid) on \(devicePath)") }
        }
    }
}

