import GatewayCore
import GlucoseProfile
import Support
import Synchronization

extension EventKind {
    /// The gateway set a meter's clock (old and new time in the message).
    public static let clockSet = EventKind(rawValue: "clock-set")
}

/// Which clock a meter lets a central reach, from what its GATT database shows.
public enum MeterClockAccess: String, Sendable, Equatable, CaseIterable, CustomStringConvertible {
    /// Current Time 0x2A2B of the Current Time Service.
    case currentTime = "Current Time 0x2A2B"
    /// Date Time 0x2A08 inside the Glucose Service (Roche Accu-Chek).
    case dateTime = "Date Time 0x2A08"
    /// The i-SENS vendor clock 0xFFF1.
    case vendor = "vendor clock 0xFFF1"

    public var description: String { rawValue }

    /// The characteristic of this clock on `link`, nil when the meter lacks it. The vendor clock is 0xFFF1
    /// (service 0xFFF0) or, on newer firmware, c4dea3bc-... (service c4dea010-...).
    func characteristic(on link: any MeterLink) async -> GATTUUID? {
        switch self {
        case .currentTime: await link.hasCharacteristic(.currentTime) ? .currentTime : nil
        case .dateTime: await link.hasCharacteristic(.dateTime) ? .dateTime : nil
        case .vendor: await VendorClock.characteristic(on: link)
        }
    }

    /// The clocks `link` has, in the order the gateway reads and writes them: Current Time, then Date Time,
    /// then the vendor clock.
    static func available(on link: any MeterLink) async -> [MeterClockAccess] {
        var out: [MeterClockAccess] = []
        for access in allCases where await access.characteristic(on: link) != nil { out.append(access) }
        return out
    }

    /// The value that sets this clock to `time`, the local time of the meter's zone.
    /// - Current Time: Date Time, day of week (1 Monday ... 7 Sunday), Fractions256 0, Adjust Reason 0x01
    ///   (manual time update).
    /// - Date Time: the 7-byte Date Time.
    /// - Vendor: `C0 03 01 00` then the Date Time (the i-SENS set-time command).
    public func setValue(_ time: GlucoseDateTime) -> [UInt8] {
        switch self {
        case .currentTime: time.encoded() + [Self.dayOfWeek(time), 0x00, 0x01]
        case .dateTime: time.encoded()
        case .vendor: VendorClock.commandPrefix + time.encoded()
        }
    }

    static func dayOfWeek(_ time: GlucoseDateTime) -> UInt8 {
        let days = Int((time.naiveSeconds - Int64(time.hour * 3600 + time.minute * 60 + time.second)) / 86_400)
        return UInt8(((days + 3) % 7 + 7) % 7 + 1)   // 1970-01-01 was a Thursday (4)
    }
}

/// The i-SENS vendor clock protocol on 0xFFF1 (as CareSens meters and their public integrations use it):
/// with notifications on, the central writes `C0 03 01 00` and a Date Time, all zero to ask for the time;
/// the meter notifies `05 xx xx xx` and its Date Time at offset 4. Notifications must stay on while the
/// link lasts: stopping them switches the meter off.
public enum VendorClock {
    static let commandPrefix: [UInt8] = [0xC0, 0x03, 0x01, 0x00]
    public static let getTimeCommand: [UInt8] = commandPrefix + [UInt8](repeating: 0, count: 7)
    /// The characteristic on both versions of the protocol (1.4: 0xFFF1; 1.5: a 128-bit UUID).
    public static let characteristics: [GATTUUID] = [.isensVendorClock, .isensVendorClockV15]

    /// The vendor clock characteristic `link` has, nil for none.
    public static func characteristic(on link: any MeterLink) async -> GATTUUID? {
        for uuid in characteristics where await link.hasCharacteristic(uuid) { return uuid }
        return nil
    }
    /// How long the gateway waits for the meter's answer to a time request.
    public static let answerTimeout: Duration = .seconds(5)

    /// The 7 Date Time bytes of a time answer; nil for any other notification.
    public static func answerDateTime(_ bytes: [UInt8]) -> [UInt8]? {
        guard bytes.count >= 11, bytes[0] == 0x05 else { return nil }
        return Array(bytes[4..<11])
    }
}

/// Setting a meter's clock: `meters set-clock`, and `[gateway] set_meter_clock` during a download.
public enum MeterClockWriter {
    /// A write the meter took: which clock, what it showed before and what was written.
    public struct Written: Sendable, Equatable {
        public var access: MeterClockAccess
        public var old: GlucoseDateTime
        public var new: GlucoseDateTime
    }

    public enum Failure: Error, Sendable, Equatable {
        /// Every clock the meter has refused the write; the message of the last refusal.
        case refused(String)
        case disconnected(String)
    }

    /// Writes `time` through the first of `candidates` that takes it (Current Time, then Date Time, then the
    /// vendor clock). A refusal moves on to the next; a dropped link ends at once.
    static func write(_ time: GlucoseDateTime, to candidates: [MeterClockAccess], link: any MeterLink)
        async -> Result<MeterClockAccess, Failure> {
        var last = "the meter has no clock the gateway can set"
        for access in candidates {
            guard let uuid = await access.characteristic(on: link) else { continue }
            do {
                try await link.write(uuid, access.setValue(time))
                return .success(access)
            } catch {
                if error.kind == .disconnected { return .failure(.disconnected(error.message)) }
                let code = error.attError.map { " (ATT error 0x" + String($0, radix: 16) + ")" } ?? ""
                last = "\(access) refused: \(error.message)\(code)"
            }
        }
        return .failure(.refused(last))
    }

    static func describe(_ written: Written, zone: String, skewSeconds: Int) -> String {
        "meter clock set through \(written.access): was \(written.old), now \(written.new) (\(zone)); it was off by \(skewSeconds) s"
    }
}

// MARK: - In a download

extension MeterDownload.Run {
    /// Asks the vendor clock for the time and waits (bounded) for the answer, with when the time was asked
    /// for: as the request is written, after notifications are on (switching them on can take a while, and
    /// the meter reads its clock only once asked). Notifications on 0xFFF1 are left on until the link ends:
    /// they are not in `subscribed`, which is stopped on the way out.
    func readVendorClock(_ vendor: GATTUUID) async throws(Stop) -> (answer: [UInt8]?, asked: UnixMillis) {
        var asked = download.now()
        do {
            try await link.subscribe(vendor)
            asked = download.now()
            try await link.write(vendor, VendorClock.getTimeCommand)
        } catch {
            if error.kind == .disconnected { throw .disconnected(error.message) }
            logger.info("meter \(meter.address): cannot ask the vendor clock for the time: \(error.message)")
            return (nil, asked)
        }
        let deadline = clock.now.advanced(by: VendorClock.answerTimeout)
        let answer = try await nextValue(deadline: deadline) { uuid, bytes in
            uuid == vendor ? VendorClock.answerDateTime(bytes) : nil
        }
        if answer == nil {
            logger.info("meter \(meter.address): the vendor clock did not answer within \(VendorClock.answerTimeout)")
        }
        return (answer, asked)
    }

    /// With `set_meter_clock` on and a skew beyond the threshold, writes the gateway's time as the local
    /// time of the meter's zone. Called only with a skew measured from a usable clock value in a known zone.
    /// The readings of this download keep the correction by the skew measured before the write.
    func keepMeterClockRight(_ skew: ClockSkew, zone: MeterTimeZone, candidates: [MeterClockAccess]) async throws(Stop) {
        guard download.options.setMeterClock,
              skew.isBeyond(download.options.clinical.clockSkewThresholdSeconds) else { return }
        let new = zone.localTime(at: download.now() + 500)   // to the nearest second
        switch await MeterClockWriter.write(new, to: candidates, link: link) {
        case .success(let access):
            let written = MeterClockWriter.Written(access: access, old: skew.meterClock, new: new)
            report.clockSet = written
            clockWritten(new)
            let line = MeterClockWriter.describe(written, zone: zone.identifier, skewSeconds: skew.seconds)
            logger.notice("meter \(meter.address): \(line)")
            await log(.clockSet, code: skew.seconds, line)
        case .failure(.disconnected(let reason)):
            throw .disconnected(reason)
        case .failure(.refused(let message)):
            logger.warning("meter \(meter.address): cannot set the meter's clock (\(message)); the download continues and reading times stay corrected by the skew")
            await log(.clockSkew, code: skew.seconds, "setting the meter clock failed: \(message)")
        }
    }
}

// MARK: - `meters set-clock`

/// Sets one meter's clock once (`glucose-gateway meters set-clock ADDRESS`): under the meter's session lock,
/// connects, reads the clock, writes the gateway's time as the local time of the meter's zone, reads it
/// back where it can, logs and records it, disconnects. Downloads nothing.
public struct MeterClockSession: Sendable {
    public var radio: any MeterRadio
    public var store: any ReadingStore
    public var logger: Logger
    public var now: @Sendable () -> UnixMillis
    public var clock: any SessionClock
    public var connectTimeout: Duration
    public var lockDatabase: String?
    public var environment: [String: String]

    public init(radio: any MeterRadio, store: any ReadingStore, logger: Logger, now: @escaping @Sendable () -> UnixMillis = SystemClock.now,
                clock: any SessionClock = ContinuousClock(), connectTimeout: Duration = .seconds(20), lockDatabase: String? = nil,
                environment: [String: String] = [:]) {
        self.radio = radio
        self.store = store
        self.logger = logger
        self.now = now
        self.clock = clock
        self.connectTimeout = connectTimeout
        self.lockDatabase = lockDatabase
        self.environment = environment
    }

    public enum Outcome: Sendable, Equatable {
        /// Set; `after` is what the meter showed when read back (nil when it cannot be read back).
        case set(MeterClockWriter.Written, skewSeconds: Int, after: GlucoseDateTime?)
        /// Another process holds the meter's session lock.
        case busy
        case lockFailed(String)
        case unreachable(String)
        /// The meter offers no clock the gateway can reach.
        case noClock
        /// The clock's value was not a usable date: nothing written.
        case unusableClock
        /// The meter's time zone cannot be loaded: nothing written.
        case zoneUnknown(String)
        /// The meter refused every write.
        case refused(String)
    }

    public func run(_ meter: MeterInfo, wait: Duration = .zero) async -> Outcome {
        guard let zone = MeterTimeZone(identifier: meter.timeZone, environment: environment) else {
            return .zoneUnknown(meter.timeZone)
        }
        guard let lockDatabase else { return await unlocked(meter, zone: zone, wait: wait) }
        let attempt = await MeterSessionLock.withLock(database: lockDatabase, address: meter.address) {
            await unlocked(meter, zone: zone, wait: wait)
        }
        switch attempt {
        case .ran(let outcome): return outcome
        case .held: return .busy
        case .unavailable(let error): return .lockFailed(error.description)
        }
    }

    private func unlocked(_ meter: MeterInfo, zone: MeterTimeZone, wait: Duration) async -> Outcome {
        let address = meter.address.uppercased()
        if wait > .zero {
            do { _ = try await radio.waitForMeter(address: address, timeout: wait) } catch { return .unreachable(error.message) }
        }
        let link: any MeterLink
        do {
            link = try await radio.connect(address: address, timeout: max(connectTimeout, wait))
        } catch {
            return .unreachable(error.message)
        }
        let answers = VendorAnswers()
        let forwarder = Task {
            for await event in link.events {
                if case .value(let uuid, let bytes) = event, VendorClock.characteristics.contains(uuid),
                   let value = VendorClock.answerDateTime(bytes) {
                    answers.deliver(value)
                }
            }
            answers.end()
        }
        let outcome = await setClock(link: link, address: address, zone: zone, answers: answers)
        await link.disconnect()
        forwarder.cancel()
        return outcome
    }

    private func setClock(link: any MeterLink, address: String, zone: MeterTimeZone, answers: VendorAnswers) async -> Outcome {
        let available = await MeterClockAccess.available(on: link)
        guard let readable = available.first else { return .noClock }
        enum Read { case value([UInt8]?), stop(Outcome) }
        // When the time was asked for: as the read starts, or for the vendor clock as its time request is
        // written, after its notifications are on.
        var askedAt = now()
        func read(_ access: MeterClockAccess) async -> Read {
            switch access {
            case .currentTime, .dateTime:
                guard let uuid = await access.characteristic(on: link) else { return .value(nil) }
                do { return .value(try await link.read(uuid)) } catch {
                    return error.kind == .disconnected ? .stop(.unreachable(error.message)) : .value(nil)
                }
            case .vendor:
                guard let uuid = await VendorClock.characteristic(on: link) else { return .value(nil) }
                do {
                    try await link.subscribe(uuid)
                    askedAt = now()
                    try await link.write(uuid, VendorClock.getTimeCommand)
                } catch {
                    return error.kind == .disconnected ? .stop(.unreachable(error.message)) : .value(nil)
                }
                return .value(await answers.next(clock: clock, timeout: VendorClock.answerTimeout))
            }
        }
        let before: [UInt8]?
        askedAt = now()
        switch await read(readable) {
        case .value(let v): before = v
        case .stop(let o): return o
        }
        let readAt = now()
        guard let before, let skew = ClockSkew.measure(clockValue: before, zone: zone, asked: askedAt, answered: readAt) else {
            logger.warning("meter \(address): its clock value is not a usable date; the clock is left as it is")
            return .unusableClock
        }
        let writeAt = now()
        let new = zone.localTime(at: writeAt + 500)   // to the nearest second
        switch await MeterClockWriter.write(new, to: available, link: link) {
        case .success(let access):
            let written = MeterClockWriter.Written(access: access, old: skew.meterClock, new: new)
            let line = MeterClockWriter.describe(written, zone: zone.identifier, skewSeconds: skew.seconds)
            logger.notice("meter \(address): \(line)")
            try? await store.log(GatewayEvent(at: now(), kind: .clockSet, meterAddress: address, code: skew.seconds, message: line))
            await rememberWrite(address: address, read: skew.meterClock, askedAt: askedAt, readAt: readAt, written: new, writtenAt: writeAt)
            // The vendor clock answers a set with its new time; the others are read again.
            var after: GlucoseDateTime?
            switch access {
            case .vendor:
                after = await answers.next(clock: clock, timeout: VendorClock.answerTimeout).flatMap { try? GlucoseDateTime(bytes: $0) }
            case .currentTime, .dateTime:
                if let uuid = await access.characteristic(on: link) {
                    after = (try? await link.read(uuid)).flatMap { try? GlucoseDateTime(bytes: $0) }
                }
            }
            return .set(written, skewSeconds: skew.seconds, after: after)
        case .failure(.disconnected(let reason)):
            return .unreachable(reason)
        case .failure(.refused(let message)):
            return .refused(message)
        }
    }
}

extension MeterClockSession {
    /// Adds the clock as read and as written to the meter's clock history, so that the next download places
    /// the records taken before the write on the old clock. Neither knows the meter's highest record (this
    /// session downloads nothing): the next download places the records around the write by its time and
    /// their order, and keeps the ones that cannot be placed `time-uncertain`
    /// (`ClockPlacer.place(_:base:unsequenced:upper:)`).
    func rememberWrite(address: String, read: GlucoseDateTime, askedAt: UnixMillis, readAt: UnixMillis, written: GlucoseDateTime,
                       writtenAt: UnixMillis) async {
        // The clock as read, by the rule every measurement follows; as written, the value set at `writtenAt`.
        guard let old = ClockSync.offset(read: read, asked: askedAt, answered: readAt),
              let new = ClockSync.offset(clock: written, now: writtenAt) else { return }
        do {
            try await store.rememberClock(address, [
                ClockSync(at: readAt, offsetSeconds: old, highestSequence: nil),
                ClockSync(at: writtenAt, offsetSeconds: new, highestSequence: nil, setByGateway: true),
            ])
        } catch {
            // The write stands; the next download then sees a change it must place from the records alone.
            logger.warning("meter \(address): cannot add the clock write to its clock history: \(error)")
        }
    }
}

/// Vendor clock answers taken from a link's events, awaited one at a time with a timeout on a session clock.
final class VendorAnswers: Sendable {
    private struct State {
        var pending: [[UInt8]] = []
        var ended = false
        var waiter: (id: Int, continuation: CheckedContinuation<[UInt8]?, Never>)?
        var nextID = 0
        /// Waits whose deadline passed before they started waiting.
        var expired: Set<Int> = []
    }
    private let state = Mutex(State())

    func deliver(_ value: [UInt8]) {
        let waiter = state.withLock { s -> CheckedContinuation<[UInt8]?, Never>? in
            guard let w = s.waiter else { s.pending.append(value); return nil }
            s.waiter = nil
            return w.continuation
        }
        waiter?.resume(returning: value)
    }

    func end() {
        let waiter = state.withLock { s -> CheckedContinuation<[UInt8]?, Never>? in
            s.ended = true
            defer { s.waiter = nil }
            return s.waiter?.continuation
        }
        waiter?.resume(returning: nil)
    }

    /// The next answer, nil when none comes within `timeout` or the link ended.
    func next(clock: any SessionClock, timeout: Duration) async -> [UInt8]? {
        let deadline = clock.now.advanced(by: timeout)
        let id = state.withLock { s -> Int in
            s.nextID += 1
            return s.nextID
        }
        let timer = Task { [weak self] in
            do { try await clock.sleep(until: deadline) } catch { return }
            self?.timeOut(id)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { (c: CheckedContinuation<[UInt8]?, Never>) in
            let now = state.withLock { s -> [UInt8]?? in
                if !s.pending.isEmpty { return .some(s.pending.removeFirst()) }
                if s.ended || s.expired.remove(id) != nil { return .some(nil) }
                s.waiter = (id, c)
                return nil
            }
            if let now { c.resume(returning: now) }
        }
    }

    private func timeOut(_ id: Int) {
        let waiter = state.withLock { s -> CheckedContinuation<[UInt8]?, Never>? in
            guard let w = s.waiter, w.id == id else { s.expired.insert(id); return nil }
            s.waiter = nil
            return w.continuation
        }
        waiter?.resume(returning: nil)
    }
}
