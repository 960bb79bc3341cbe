import GatewayCore
import GlucoseProfile

extension ExclusionReason {
    /// A record a meter adds by itself, not a measurement: the HI dated 2037 that a ForaCare TN'G adds when
    /// its memory is full. Its own reason, not `time-in-future`, so that no clock-skew correction can ever
    /// release it for upload.
    public static let memoryFullMarker = ExclusionReason(rawValue: "memory-full-marker")
}

/// Device Information strings as stored and shown: NUL bytes and other control characters removed
/// (Ascensia Contour meters pad theirs with NULs, which ended up in Nightscout's `device`), surrounding
/// white space trimmed, at most 64 characters (`IdentityString`); bytes that are not UTF-8 become U+FFFD.
public enum IdentityText {
    /// The text to store, nil when nothing printable is left; `changed` when it differs from the bytes.
    public static func clean(_ bytes: [UInt8]) -> (text: String?, changed: Bool) {
        let decoded = String(decoding: bytes, as: UTF8.self)
        let text = IdentityString.bounded(decoded.trimmingWhitespace()).trimmingWhitespace()
        let changed = Array(text.utf8) != bytes
        return (text.isEmpty ? nil : text, changed)
    }

    /// The bytes as sent, kept beside a string cleaning changed: at most the 512 an attribute value holds.
    public static func raw(_ bytes: [UInt8]) -> [UInt8] { Array(bytes.prefix(IdentityString.maxRawBytes)) }
}

extension String {
    fileprivate func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
              let last = scalars.lastIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        return String(scalars[first...last])
    }
}

/// What the gateway does differently for one meter, chosen only from what the meter shows and the
/// gateway stores (Device Information strings, the advertised name), so `meters` and `status` can show
/// it without a connection and a user can see why. A meter no rule names gets the Glucose Profile as
/// written.
public struct MeterHandling: Sendable, Equatable, CustomStringConvertible {
    public struct Kind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The meter numbers its records newest first (0 = newest, every number moving up by one with each
        /// new record): TaiDoc firmware 1.2.4, by manufacturer "TaiDoc..." and firmware "1.2.4". See
        /// `DownloadSession.reversedSequenceProcedure`.
        public static let reversedSequence = Kind(rawValue: "reversed-sequence")
        /// The Device Information strings carried NUL or control characters, removed before storing them.
        public static let identityStringsCleaned = Kind(rawValue: "identity-strings-cleaned")
        /// A ForaCare TN'G (advertised name "TNG" as its first word, no manufacturer string, or "ForaCare"): its HI records
        /// dated 2037 or later are excluded as `memory-full-marker`.
        public static let memoryFullMarker = Kind(rawValue: "memory-full-marker")
    }

    public private(set) var kinds: [Kind]

    public init(kinds: [Kind]) { self.kinds = kinds }

    /// The handling for a meter as stored.
    public init(for meter: MeterInfo) {
        var kinds: [Kind] = []
        if Self.numbersNewestFirst(manufacturer: meter.manufacturer, firmware: meter.firmware) {
            kinds.append(.reversedSequence)
        }
        if !meter.rawIdentity.isEmpty { kinds.append(.identityStringsCleaned) }
        if Self.isForaTNG(name: meter.name, manufacturer: meter.manufacturer) { kinds.append(.memoryFullMarker) }
        self.kinds = kinds
    }

    public func contains(_ kind: Kind) -> Bool { kinds.contains(kind) }

    public var isEmpty: Bool { kinds.isEmpty }

    /// `reversed-sequence, identity-strings-cleaned`, or `none`.
    public var description: String { kinds.isEmpty ? "none" : kinds.map(\.rawValue).joined(separator: ", ") }

    /// TaiDoc firmware 1.2.4 (Diamond Mobile Mini DM30b): "reversed sequence numbers" (xDrip
    /// `BluetoothGlucoseMeter.java`). Other TaiDoc firmware is not known to do it and keeps the profile.
    static func numbersNewestFirst(manufacturer: String?, firmware: String?) -> Bool {
        guard let manufacturer, manufacturer.lowercased().hasPrefix("taidoc") else { return false }
        guard let firmware else { return false }
        var f = Substring(firmware.lowercased())
        if f.hasPrefix("v") { f = f.dropFirst() }
        return f == "1.2.4"
    }

    /// ForaCare TN'G Voice: advertises as "TNG VOICE ..." and sends no manufacturer string (Tidepool
    /// uploader `bluetoothLEDriver.js`). "TNG" must be a word of its own: "TNGX 100" is another meter.
    static func isForaTNG(name: String?, manufacturer: String?) -> Bool {
        guard let name else { return false }
        let upper = name.uppercased()
        guard upper.hasPrefix("TNG") else { return false }
        if let next = upper.unicodeScalars.dropFirst(3).first, next.properties.isAlphabetic || next.properties.numericType != nil {
            return false
        }
        guard let manufacturer else { return true }
        return manufacturer.lowercased().hasPrefix("fora")
    }

    /// The year from which a Fora HI record is the memory-full marker (it is dated 2037).
    static let markerYear = 2037

    /// A reading as this meter's handling stores it: a Fora memory-full marker gets its own exclusion.
    public func applied(to reading: NewReading) -> NewReading {
        guard contains(.memoryFullMarker), reading.baseTime.year >= Self.markerYear else { return reading }
        let status = SensorStatus(rawValue: UInt16(truncatingIfNeeded: reading.sensorStatus ?? 0))
        let isHigh = reading.special == SFloat.positiveInfinity.special || status.contains(.resultTooHigh)
        guard isHigh else { return reading }
        var r = reading
        r.exclusion = .memoryFullMarker
        return r
    }
}

// MARK: - Meters that number newest first

/// What stays the same about a record of a meter whose numbers shift: everything it sends but the
/// sequence number (bytes 1-2 of 0x2A18), with the time the meter sent.
struct ShiftFreeKey: Hashable {
    var userFacingTime: String
    var measurement: [UInt8]
    var context: [UInt8]?

    init(_ r: NewReading) {
        userFacingTime = r.userFacingTime.isoString
        var m = r.rawMeasurement
        if m.count >= 3 { m.replaceSubrange(1..<3, with: [0, 0]) }
        measurement = m
        var c = r.rawContext
        if var bytes = c, bytes.count >= 3 { bytes.replaceSubrange(1..<3, with: [0, 0]); c = bytes }
        context = c
    }
}

extension DownloadSession {
    /// The download of a meter that numbers its records newest first (`MeterHandling.Kind.reversedSequence`).
    ///
    /// On such a meter number 0 is always the newest record, so every stored number goes up by one with each
    /// new record: the numbers say nothing about a record by themselves, and "greater than or equal to the
    /// highest stored + 1" asks for the oldest records again and never for the new ones. What stays the same
    /// is the record itself (its time and bytes, the number aside), and the count.
    ///
    /// - Each record is stored under its position from the oldest, `count - 1 - number` (the number a
    ///   meter that counts upwards would have given it), and the number as sent stays in its raw bytes.
    /// - With `h` the highest position stored and `n` the meter's count now, the newest `n - h - 1` records
    ///   are new and number `n - h - 1` should be the newest one stored: only numbers up to that one are
    ///   asked for (`<=`). When that record is not stored (records were deleted, the memory wrapped, or a
    ///   record came between count and report), everything is downloaded instead; also when that report's
    ///   lowest number is dated before its highest (the meter numbers oldest first whatever its identity
    ///   says), so a wrong identity costs a full download each sync, never a reading.
    /// - Nothing is stored before a report has ended, and then all of it in one transaction, oldest first,
    ///   each record recognised by `ShiftFreeKey` among those stored (never stored twice): a link that drops
    ///   midway leaves nothing half-stored, and the next sync asks again. Afterwards the highest position
    ///   is set to `n - 1`, but only when the report brought every number it should have: a report that ended
    ///   early or skipped a number keeps what came and leaves the highest position lower, so the next
    ///   sync asks for the missing ones again: the highest position is set just below the oldest missing
    ///   record's (to -1, "download everything", when the oldest record itself is missing).
    /// - A meter whose numbers go beyond its count (it counted wrong, or a record came between count and
    ///   report) is positioned by its highest number instead, so no two records share a position.
    func reversedSequenceProcedure() async throws(Stop) {
        holdCommits = true
        let count: Int
        try await writeRACP(.reportNumberAll)
        switch try await nextRACPResponse() {
        case .numberOfRecords(let n):
            count = Int(n)
        case .response(_, let code) where code == .noRecordsFound:
            count = 0
        case .response(_, let code):
            throw .failed(DownloadError(.meter, "the meter numbers its records newest first and did not count them (\(code)); nothing is downloaded without the count"))
        }
        report.total = count
        intake.setTotal(count)
        guard count > 0 else {
            report.outcome = .noRecords
            return
        }
        let highest = try await highestStoredSequence()
        if let highest, highest >= 0, highest < count, let newest = UInt16(exactly: count - 1 - highest) {
            let request = RACPRequest.reportRecords(.lessThanOrEqual, .sequenceNumber(min: nil, max: newest))
            logger.info("meter \(meter.address): numbers newest first; \(count) records, asking for numbers 0...\(newest)")
            let records = try await reversedReport(request, expected: Int(newest) + 1)
            if let records {
                let (readings, positions) = positioned(records, count: count)
                let stored = try await storedKeys(readings)
                let overlap = readings.first { $0.rawMeasurement.count >= 3 && sequenceSent($0) == newest }
                let turned = datesRiseWithNumbers(readings)
                if turned {
                    logger.notice("meter \(meter.address): its records are dated oldest first by number, not newest first; downloading everything")
                }
                if let overlap, stored[ShiftFreeKey(overlap)] != nil, !turned {
                    try await commitReversed(readings, stored: stored, count: positions,
                                             missing: highestMissing(records, below: Int(newest) + 1))
                    return
                }
            }
            logger.notice("meter \(meter.address): the newest stored record is not where the count puts it; downloading everything")
        } else if let highest, highest >= count {
            logger.notice("meter \(meter.address): the meter holds \(count) records, fewer than stored (positions up to \(highest)); downloading everything")
        }
        guard let records = try await reversedReport(.reportAll, expected: count) else {
            report.outcome = .noRecords
            return
        }
        let (readings, positions) = positioned(records, count: count)
        try await commitReversed(readings, stored: try await storedKeys(readings), count: positions,
                                 missing: highestMissing(records, below: positions))
    }

    /// The highest number below `n` that `records` lack; nil when they have them all.
    private func highestMissing(_ records: [PendingRecord], below n: Int) -> Int? {
        var seen = Set<Int>()
        for p in records where Int(p.decoded.measurement.sequenceNumber) < n { seen.insert(Int(p.decoded.measurement.sequenceNumber)) }
        guard seen.count < n else { return nil }
        return (0..<n).reversed().first { !seen.contains($0) }
    }

    /// Runs one report and returns everything it brought, nil for "no records found". The records stay
    /// uncommitted.
    private func reversedReport(_ request: RACPRequest, expected: Int) async throws(Stop) -> [PendingRecord]? {
        var request = request
        while true {
            let before = intake.snapshot
            try await writeRACP(request)
            var answer: RACPResponseCode?
            while answer == nil {
                // Other indications (a stray count) are not the report's answer.
                if case .response(let op, let code) = try await nextRACPResponse(), op == .reportStoredRecords { answer = code }
            }
            guard let code = answer else { continue }
            if code == .success {
                try await waitForLateRecords(receivedBefore: before.received + before.malformed, expected: expected)
                return takeAll()
            }
            if code == .noRecordsFound {
                _ = takeAll()
                return nil
            }
            if RACPProcedure.refusals.contains(code), request != .reportAll {
                logger.info("meter \(meter.address): filtered report refused (\(code)); downloading everything")
                _ = takeAll()
                request = .reportAll
                continue
            }
            throw .failed(DownloadError(.meter, "meter ended the report with \(code)"))
        }
    }

    /// While commits are held: takes a full batch out of the intake (so the next batch wakes the session
    /// again) and ends the download when more is held than any report can bring.
    func holdReport() throws(Stop) {
        heldRecords += intake.take(final: false, limit: Int.max)
        let limit = download.options.maxHeldRecords
        guard heldRecords.count > limit else { return }
        heldRecords = []
        throw .failed(DownloadError(.meter, "the meter sent more than \(limit) records in one report without ending it; nothing of it is stored"))
    }

    private func takeAll() -> [PendingRecord] {
        var all = heldRecords
        heldRecords = []
        while true {
            let part = intake.take(final: true, limit: 10_000)
            if part.isEmpty { return all }
            all += part
        }
    }

    private func sequenceSent(_ r: NewReading) -> UInt16 {
        UInt16(r.rawMeasurement[1]) | UInt16(r.rawMeasurement[2]) << 8
    }

    /// Whether the lowest number of a report is dated before its highest: the meter numbers oldest first
    /// after all (its identity said otherwise), and the `<=` report brought its oldest records, not its
    /// newest. Only a full download, recognising every record by `ShiftFreeKey`, is safe then.
    private func datesRiseWithNumbers(_ readings: [NewReading]) -> Bool {
        let dated = readings.filter { $0.meterInstant != nil && $0.rawMeasurement.count >= 3 }
        guard let low = dated.min(by: { sequenceSent($0) < sequenceSent($1) }),
              let high = dated.max(by: { sequenceSent($0) < sequenceSent($1) }),
              sequenceSent(low) != sequenceSent(high) else { return false }
        return low.userFacingTime.naiveSeconds < high.userFacingTime.naiveSeconds
    }

    /// The readings of `records`, each under its position from the oldest (`n - 1 - number`), with `n` the
    /// count or, when a number reaches beyond it, the highest number + 1; and that `n`.
    private func positioned(_ records: [PendingRecord], count: Int) -> (readings: [NewReading], positions: Int) {
        let highestSent = records.map { Int($0.decoded.measurement.sequenceNumber) }.max() ?? -1
        let n = max(count, highestSent + 1)
        let readings = records.map { p in
            var r = handling.applied(to: interpreter.reading(p.decoded, context: p.context, rawContext: p.rawContext,
                                                              receivedAt: p.receivedAt))
            r.sequence = n - 1 - Int(p.decoded.measurement.sequenceNumber)
            return r
        }
        return (readings, n)
    }

    /// How many readings the store has for each key among `readings`' times.
    private func storedKeys(_ readings: [NewReading]) async throws(Stop) -> [ShiftFreeKey: Int] {
        let stored: [StoredReading]
        do {
            stored = try await download.store.readings(meter.address, atUserFacingTimes: readings.map(\.userFacingTime))
        } catch {
            throw .failed(DownloadError(.store, "cannot read the stored readings to compare: \(error)"))
        }
        var keys: [ShiftFreeKey: Int] = [:]
        for s in stored { keys[ShiftFreeKey(s.reading), default: 0] += 1 }
        return keys
    }

    /// Stores, in one transaction and oldest first, the readings not stored yet (a key stored k times
    /// accounts for k readings), then sets the highest position to `count - 1`, or when the report lacked
    /// numbers up to `missing`, just below that record's position.
    private func commitReversed(_ readings: [NewReading], stored: [ShiftFreeKey: Int], count: Int,
                                missing: Int?) async throws(Stop) {
        var left = stored
        var fresh: [NewReading] = []
        var seen = 0
        for r in readings.sorted(by: { $0.sequence < $1.sequence }) {
            let key = ShiftFreeKey(r)
            if let n = left[key], n > 0 {
                left[key] = n - 1
                seen += 1
            } else {
                fresh.append(r)
            }
        }
        do {
            let outcome = try await download.store.insertReadings(fresh)
            report.stored += outcome.inserted
            report.duplicates += seen + fresh.count - outcome.inserted - outcome.conflicts.count
            await note(outcome.conflicts)
            if let missing {
                logger.warning("meter \(meter.address): numbers newest first and its report lacked record \(missing) and maybe others; \(fresh.count) new records stored, the next sync asks again")
            }
            try await download.store.resetHighestSequence(meter.address, to: missing.map { count - 2 - $0 } ?? count - 1)
        } catch {
            throw .failed(DownloadError(.store, "cannot store readings: \(error)"))
        }
        report.outcome = .completed
    }
}
