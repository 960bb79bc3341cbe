import GatewayCore
import GlucoseProfile
import Support

/// Simulated time: every duration of the meter model (notification delay, new-record interval,
/// advertising bursts, device expiry) is divided by `scale` before sleeping, so tests can compress minutes
/// into seconds.
public struct SimulationClock: Sendable {
    public var scale: Double
    /// The clock the simulated time runs on: the real one, or a manual one in tests.
    public var base: any SessionClock
    /// `scale` is kept within 0.001...100000.
    public init(scale: Double = 1, base: any SessionClock = ContinuousClock()) {
        self.scale = scale.isFinite && scale > 0 ? min(max(scale, 0.001), 100_000) : 1
        self.base = base
    }

    /// Real seconds for simulated `seconds`, at most about 30 years (so the conversion cannot overflow).
    public func realSeconds(_ seconds: Double) -> Double {
        guard seconds.isFinite, seconds > 0 else { return 0 }
        return min(seconds / scale, 1e9)
    }

    public func sleep(seconds: Double) async throws {
        let real = realSeconds(seconds)
        guard real > 0 else { return }
        try await base.sleep(for: .milliseconds(Int64((real * 1000).rounded(.up))))
    }
}

/// What a running meter tells its front end.
public enum PeripheralEvent: Sendable, Equatable {
    /// Send a notification (0x2A18, 0x2A34) or indication (0x2A52).
    case value(GATTUUID, [UInt8])
    /// The meter drops the link (fault).
    case dropLink
    /// Advertising starts or stops.
    case advertising(Bool)
    /// A new record was stored.
    case recordAdded(UInt16)
}

/// One simulated meter at run time: the `GlucoseServer` state machine plus the clocked parts (pacing of a
/// procedure's values, new records every N seconds, advertising bursts). Front ends consume `events` and
/// call in when the peer subscribes, writes, reads or the link changes.
public actor MeterPeripheral {
    public nonisolated let address: String
    public nonisolated let events: AsyncStream<PeripheralEvent>
    private let continuation: AsyncStream<PeripheralEvent>.Continuation
    private var server: GlucoseServer
    private let clock: SimulationClock
    private var pump: Task<Void, Never>?
    private var pumpGeneration = 0
    private var background: [Task<Void, Never>] = []
    private var advertiseUntil: Task<Void, Never>?
    public private(set) var isAdvertising = false
    public private(set) var isLinked = false
    /// The meter's own clock (see `MeterClock`), on the wall clock `wallClock` and simulated time.
    var meterClock: MeterClockState
    private let wallClock: @Sendable () -> UnixMillis
    private let startedAt: ContinuousClock.Instant

    public init(meter: MeterDescription, clock: SimulationClock = SimulationClock(),
                wallClock: @escaping @Sendable () -> UnixMillis = { SystemClock.now() }) {
        address = meter.address
        server = GlucoseServer(meter: meter)
        self.clock = clock
        self.wallClock = wallClock
        startedAt = clock.base.now
        meterClock = MeterClockState(clock: meter.clock)
        (events, continuation) = AsyncStream.makeStream(of: PeripheralEvent.self, bufferingPolicy: .unbounded)
    }

    /// The meter as it is now (records added at run time included).
    public var meter: MeterDescription { server.meter }

    /// Starts the clocked behaviour: advertising per plan and new records per plan.
    public func start() {
        switch server.meter.advertising {
        case .always:
            setAdvertising(true)
        case .off:
            setAdvertising(false)
        case .bursts(let on, let off):
            let clock = self.clock
            background.append(Task { [weak self] in
                while !Task.isCancelled {
                    await self?.setAdvertising(true)
                    do { try await clock.sleep(seconds: on) } catch { return }
                    await self?.setAdvertising(false)
                    do { try await clock.sleep(seconds: off) } catch { return }
                }
            })
        }
        if let plan = server.meter.newRecords {
            let clock = self.clock
            background.append(Task { [weak self] in
                while !Task.isCancelled {
                    do { try await clock.sleep(seconds: plan.intervalSeconds) } catch { return }
                    guard let self else { return }
                    if await self.addGeneratedRecord(minutesLater: Int(min(max(1, plan.intervalSeconds / 60), 100_000))) == nil { return }
                }
            })
        }
    }

    /// Stops everything and finishes `events`.
    public func stop() {
        for t in background { t.cancel() }
        background.removeAll()
        pump?.cancel()
        pump = nil
        advertiseUntil?.cancel()
        continuation.finish()
    }

    // MARK: Advertising

    private func setAdvertising(_ on: Bool) {
        guard on != isAdvertising else { return }
        isAdvertising = on
        continuation.yield(.advertising(on))
    }

    /// Advertises for `seconds` (simulated), as after a button press; with the `always` plan it changes nothing.
    public func advertise(seconds: Double) {
        setAdvertising(true)
        advertiseUntil?.cancel()
        if case .always = server.meter.advertising { return }
        let clock = self.clock
        advertiseUntil = Task { [weak self] in
            do { try await clock.sleep(seconds: seconds) } catch { return }
            await self?.endTemporaryAdvertising()
        }
    }

    private func endTemporaryAdvertising() {
        if case .always = server.meter.advertising { return }
        setAdvertising(false)
    }

    // MARK: Records and faults

    public func store(_ record: MeterRecord) {
        server.store(record)
        continuation.yield(.recordAdded(record.sequenceNumber))
        announceNewRecord()
    }

    @discardableResult
    public func addGeneratedRecord(minutesLater: Int = 5) -> MeterRecord? {
        guard let r = server.addGeneratedRecord(minutesLater: minutesLater) else { return nil }
        continuation.yield(.recordAdded(r.sequenceNumber))
        announceNewRecord()
        return r
    }

    /// A meter with records to send advertises for a while after a measurement.
    private func announceNewRecord() {
        if case .always = server.meter.advertising { return }
        if !isLinked { advertise(seconds: 30) }
    }

    public var nextSequenceNumber: UInt16 { server.nextSequenceNumber }

    public func setFaults(_ faults: MeterFaults) { server.setFaults(faults) }

    // MARK: Link

    public func linkUp() { isLinked = true }

    public func linkDown() {
        isLinked = false
        pump?.cancel()
        pump = nil
        pumpGeneration += 1
        server.linkDown()
    }

    public func setSubscribed(_ uuid: GATTUUID, _ on: Bool) {
        let wasOn = server.subscriptions.contains(uuid)
        server.setSubscribed(uuid, on)
        // An i-SENS meter switches itself off when notifications on its vendor clock stop.
        if uuid == server.meter.clock.characteristic, wasOn, !on, isLinked, server.meter.clock.isVendor {
            continuation.yield(.dropLink)
        }
    }

    public func read(_ uuid: GATTUUID) -> [UInt8]? {
        if let value = readClock(uuid) { return value }
        return server.read(uuid)
    }

    /// A RACP write. On success the procedure is queued; call `runProcedure()` once the write's response
    /// has gone out, so the peer sees the write answered before the first notification.
    public func writeRACP(_ bytes: [UInt8]) throws(GlucoseServer.ATTError) {
        try server.writeRACP(bytes)
    }

    public var isProcedureRunning: Bool { server.isProcedureRunning }

    /// Sends the queued values of the running procedure, paced by the notification delay.
    public func runProcedure() {
        guard pump == nil else { return }
        pumpGeneration += 1
        let generation = pumpGeneration
        pump = Task { [weak self] in await self?.drain(generation: generation) }
    }

    private func drain(generation: Int) async {
        defer { if pumpGeneration == generation { pump = nil } }
        while !Task.isCancelled, pumpGeneration == generation {
            let delay = server.meter.faults.notificationDelay
            if delay > 0 {
                do { try await clock.sleep(seconds: delay) } catch { return }
                guard pumpGeneration == generation else { return }
            }
            guard let out = server.nextOutput() else { return }
            switch out {
            case .value(let uuid, let bytes):
                continuation.yield(.value(uuid, bytes))
            case .dropLink:
                continuation.yield(.dropLink)
                return
            }
        }
    }
}

// MARK: - Clock

extension MeterPeripheral {
    /// Simulated seconds since the meter started.
    var simulatedSeconds: Double {
        let elapsed = clock.base.now - startedAt
        return (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18) * clock.scale
    }

    /// What the meter's clock shows now, and its skew (meter minus true local time) in seconds.
    public var clockReading: (time: GlucoseDateTime, skewSeconds: Double) {
        let s = simulatedSeconds
        return (meterClock.time(utcMillis: wallClock(), simulatedSeconds: s), meterClock.skew(simulatedSeconds: s))
    }

    func readClock(_ uuid: GATTUUID) -> [UInt8]? {
        let kind = meterClock.clock.kind
        switch uuid {
        case .currentTime where kind == .currentTime:
            return MeterClockState.currentTimeValue(clockReading.time)
        case .dateTime where kind == .glsDateTime:
            return clockReading.time.encoded()
        default:
            return nil
        }
    }

    /// A write to the clock characteristic: Current Time (10 bytes), Date Time (7 bytes) or the vendor
    /// command (`ISENSClockProtocol`). Setting moves the clock; the vendor clock answers with its time.
    /// Errors: 0x80 for a write the meter refuses (its clock is read-only), 0xFF (out of range) for a value
    /// that is not a valid date or command.
    /// Writes the meter's clock characteristic; returns the time the clock was set to, nil for a vendor
    /// command that only asks for the time.
    @discardableResult
    public func writeClock(_ uuid: GATTUUID, _ bytes: [UInt8]) throws(GlucoseServer.ATTError) -> GlucoseDateTime? {
        let c = meterClock.clock
        var setTo: GlucoseDateTime?
        switch uuid {
        case .currentTime where c.kind == .currentTime, .dateTime where c.kind == .glsDateTime:
            guard c.writable else { throw GlucoseServer.ATTError(0x80) }
            let expected = uuid == .currentTime ? 10 : 7
            guard bytes.count == expected, let time = try? GlucoseDateTime(bytes: bytes) else {
                throw GlucoseServer.ATTError(0xFF)
            }
            meterClock.set(to: time, utcMillis: wallClock(), simulatedSeconds: simulatedSeconds)
            setTo = time
        case _ where c.isVendor && uuid == c.characteristic:
            guard let command = ISENSClockProtocol.command(bytes) else { throw GlucoseServer.ATTError(0xFF) }
            if case .setTime(let time) = command {
                guard c.writable else { throw GlucoseServer.ATTError(0x80) }
                meterClock.set(to: time, utcMillis: wallClock(), simulatedSeconds: simulatedSeconds)
                setTo = time
            }
            // The answer follows the write's response.
            Task { [weak self] in
                try? await Task.sleep(for: .milliseconds(20))
                await self?.sendVendorClockAnswer()
            }
        default:
            throw GlucoseServer.ATTError(0x80)
        }
        return setTo
    }

    private func sendVendorClockAnswer() {
        guard isLinked, let uuid = meterClock.clock.characteristic, server.subscriptions.contains(uuid) else { return }
        continuation.yield(.value(uuid, ISENSClockProtocol.answer(clockReading.time)))
    }
}
