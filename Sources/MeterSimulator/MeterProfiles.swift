import GatewayCore
import GlucoseProfile

/// How a simulated meter departs from the Glucose Profile in ways that are not faults of one download
/// but how the meter always behaves (its firmware).
public struct MeterQuirks: Sendable, Equatable {
    /// How the meter numbers its records.
    public enum Numbering: String, Sendable, Equatable {
        /// As the specification says: each new record gets the next number (oldest first).
        case oldestFirst = "oldest-first"
        /// Sequence number 0 is always the newest record: a new record becomes 0 and every stored record's
        /// number goes up by one. Report order (ascending numbers) is newest first, "first record" is the
        /// newest and "last record" the oldest; a "greater than or equal N" filter selects the N-th newest
        /// and everything older.
        case newestFirst = "newest-first"
    }

    /// What an RACP write does while RACP indications are off.
    public enum RACPWithoutIndications: String, Sendable, Equatable {
        /// The write fails with ATT error 0x81, "Client Characteristic Configuration descriptor improperly
        /// configured" (what the specification asks for).
        case attError = "att-error"
        /// The write succeeds and the meter never answers.
        case silent
    }

    public var numbering: Numbering
    public var racpWithoutIndications: RACPWithoutIndications

    public init(numbering: Numbering = .oldestFirst, racpWithoutIndications: RACPWithoutIndications = .attError) {
        self.numbering = numbering
        self.racpWithoutIndications = racpWithoutIndications
    }
}

/// A built-in meter: a `MeterDescription` that reproduces what public bug reports and fixes record about one
/// real meter model. Each profile's `evidence` names its sources; what the sources do not say (exact model
/// strings, feature bits, the advertised name's digits) is marked as unverified and kept plain.
public struct MeterProfile: Sendable {
    public var name: String
    /// One line: what the profile reproduces.
    public var summary: String
    /// Where the behaviour comes from.
    public var evidence: String
    /// The meter, with its default address, name, PIN and records.
    public var meter: MeterDescription

    /// Every built-in profile, in the order `--list-profiles` prints them.
    public static let all: [MeterProfile] = [
        contourNextOne, accuChekGuide, accuChekInstant, careSens, foraTNG, taiDocReversed, genericGLS,
    ]

    public static func named(_ name: String) -> MeterProfile? {
        all.first { $0.name == name }
    }

    public static var names: [String] { all.map(\.name) }

    /// The first record's time in every profile: 2024-03-05 07:30, as `MeterSeries.defaultStart`.
    static let start = time(2024, 3, 5, 7, 30)

    /// A constant date-time (the constants here are all valid dates).
    static func time(_ y: Int, _ mo: Int, _ d: Int, _ h: Int, _ mi: Int, _ s: Int = 0) -> GlucoseDateTime {
        GlucoseDateTime(year: y, month: mo, day: d, hour: h, minute: mi, second: s) ?? GlucoseDateTime(naiveSeconds: 0)
    }

    // Ascensia Contour Next One / Plus One.
    // - Whole history sent again when asked for all records; a client must ask for records newer than the
    //   highest it has (xDrip issue 762, fixed in xDrip pull request 4499, `RecordsCmdTx
    //   .getNewerThanSequenceExclusive`). The meter itself answers "all records" with all of them.
    // - RACP stays silent until RACP indications are on (flutter_blue issue 830): the write is accepted
    //   and nothing comes back.
    // - Device Information strings carry NUL bytes: xDrip's Nightscout `device` became
    //   "...AscensiaDiabetesCare\u0000..." (cgm-remote-monitor issue 5205). Here the strings are NUL-padded.
    // - Clock: Current Time Service (the Contour has CTS; xDrip reads it). Unverified: the advertised name's digits, the model string, the
    //   feature bits.
    public static let contourNextOne = MeterProfile(
        name: "contour-next-one",
        summary: "Ascensia Contour Next One: NUL bytes in Device Information, RACP silent until indications are on",
        evidence: "xDrip issue 762 and pull request 4499; flutter_blue issue 830; cgm-remote-monitor issue 5205",
        meter: MeterDescription(
            address: "D0:1A:A7:00:00:01",
            name: "Contour7012345",
            passkey: 123456,
            deviceInformation: DeviceInformation(manufacturer: "Ascensia Diabetes Care\u{0}\u{0}",
                                                 model: "Contour Next One\u{0}", serial: "7012345\u{0}",
                                                 firmware: "1.4.0\u{0}"),
            features: 0x0020 | 0x0400,
            records: MeterSeries.records(count: 12, firstSequence: 1, start: start, intervalMinutes: 240,
                                         timeOffset: nil, unit: .kilogramPerLitre, withContext: true),
            clock: MeterClock(kind: .currentTime),
            quirks: MeterQuirks(racpWithoutIndications: .silent)
        )
    )

    // Roche Accu-Chek Guide.
    // - Measuring range 20-600 mg/dL: below is LO, above HI (Tidepool uploader `915deb387`).
    // - Clock in Date Time 0x2A08 inside the Glucose Service (xDrip `BluetoothGlucoseMeter.java`: for a
    //   manufacturer starting "Roche" the Current Time read becomes a Date Time read).
    // - Pairing from the meter's menu, Settings > Wireless > Pairing (xDrip issue 208).
    // - Roche sends time offsets (+60 and +339 minutes seen, react-native-ble-manager issue 1162).
    // Unverified: the model string and feature bits.
    public static let accuChekGuide = MeterProfile(
        name: "accu-chek-guide",
        summary: "Roche Accu-Chek Guide: range 20-600 mg/dL (LO and HI records), time offsets, clock in GLS Date Time",
        evidence: "Tidepool uploader 915deb387; xDrip BluetoothGlucoseMeter.java (Roche Date Time); xDrip issue 208; react-native-ble-manager issue 1162",
        meter: MeterDescription(
            address: "C0:26:DA:00:00:02",
            name: "meter+06543210",
            passkey: 123456,
            deviceInformation: DeviceInformation(manufacturer: "Roche", model: "Accu-Chek Guide", serial: "06543210",
                                                 firmware: "1.0"),
            features: 0x0020 | 0x0400,
            records: rangeRecords(low: 20, high: 600, timeOffset: 60, withContext: true),
            clock: MeterClock(kind: .glsDateTime)
        )
    )

    // Roche Accu-Chek Instant.
    // - No Glucose Measurement Context 0x2A34 (Tidepool uploader `915deb387`).
    // - Measuring range 10-600 mg/dL (same commit): 15 mg/dL is a value, not LO.
    // - An RACP write before indications are on fails with status 129 = 0x81 (Android-nRF-Toolbox issue 89,
    //   pull request 90).
    // - Clock in Date Time 0x2A08 inside the Glucose Service, as the Guide.
    public static let accuChekInstant = MeterProfile(
        name: "accu-chek-instant",
        summary: "Roche Accu-Chek Instant: no 0x2A34, range 10-600 mg/dL, RACP before indications fails with 0x81",
        evidence: "Tidepool uploader 915deb387; Android-nRF-Toolbox issue 89 and pull request 90",
        meter: MeterDescription(
            address: "C0:26:DA:00:00:03",
            name: "meter+07654321",
            passkey: 123456,
            deviceInformation: DeviceInformation(manufacturer: "Roche", model: "Accu-Chek Instant", serial: "07654321",
                                                 firmware: "1.0"),
            features: 0x0020 | 0x0400,
            hasContextCharacteristic: false,
            records: rangeRecords(low: 10, high: 600, timeOffset: 60, withContext: false),
            clock: MeterClock(kind: .glsDateTime)
        )
    )

    // i-SENS CareSens (and ReliOn).
    // - No Current Time Service; the clock is reachable only through a vendor characteristic (0xFFF0/0xFFF1,
    //   or c4dea010.../c4dea3bc... on v1.5) (xDrip `TimeTx`; Tidepool uploader `5cd9b7076`).
    // - Some firmware sends base-time month 13 (Tidepool ble-glucose `705b262` repairs it to January;
    //   the gateway keeps such a reading unresolved instead).
    // - Ketone results carry context meal 6 (xDrip `ContextRx.ketone`).
    // - The advertised name starts "CareSens" (Tidepool uploader `bluetoothLEDriver.js`), the manufacturer
    //   "i-SENS" (xDrip `BluetoothGlucoseMeter.java`). Unverified: the model string, the name's digits.
    public static let careSens = MeterProfile(
        name: "caresens",
        summary: "i-SENS CareSens: no Current Time Service, base-time month 13 on record 5, a ketone record",
        evidence: "Tidepool uploader 5cd9b7076 and bluetoothLEDriver.js; Tidepool ble-glucose 705b262; xDrip BluetoothGlucoseMeter.java, TimeTx, ContextRx",
        meter: MeterDescription(
            address: "F4:5E:AB:00:00:04",
            name: "CareSens 0A1B",
            passkey: 123456,
            deviceInformation: DeviceInformation(manufacturer: "i-SENS", model: "CareSens N Premier", serial: "CN00001234",
                                                 firmware: "1.0.3"),
            features: 0x0020 | 0x0400,
            records: careSensRecords(),
            faults: MeterFaults(malformed: [5: .invalidTime]),
            clock: MeterClock(kind: .vendor)
        )
    )

    // ForaCare TN'G Voice with a full memory.
    // - When its memory (450 records) is full it adds a bogus HI reading dated 2037 (Tidepool uploader
    //   `b12cd228f`); the exact date and time are unverified (only the year is documented).
    // - Its Device Information strings are placeholders (Tidepool uploader `935dac3ac`); the uploader notes
    //   that "Fora meters don't set the BLE manufacturer string" and recognises the advertised name
    //   "TNG VOICE" (`bluetoothLEDriver.js`). The placeholder texts here are unverified.
    // - Delta sync is unreliable (`ddbd4fc12`) and the clock is set through a vendor protocol (`cda8f3a87`):
    //   neither is reproduced.
    // The default holds 20 ordinary records and the marker (use --records 449 for a truly full memory).
    public static let foraTNG = MeterProfile(
        name: "fora-tng",
        summary: "ForaCare TN'G Voice, memory full: a bogus HI record dated 2037, placeholder Device Information",
        evidence: "Tidepool uploader b12cd228f, 935dac3ac, ddbd4fc12, cda8f3a87 and bluetoothLEDriver.js",
        meter: MeterDescription(
            address: "C0:0C:A1:00:00:05",
            name: "TNG VOICE 3A1F",
            passkey: 123456,
            deviceInformation: DeviceInformation(manufacturer: nil, model: "Model Number", serial: "Serial Number",
                                                 firmware: "Firmware Revision"),
            hasContextCharacteristic: false,
            records: withMemoryFullMarker(MeterSeries.records(count: 20, firstSequence: 1, start: start, intervalMinutes: 240,
                                                              timeOffset: nil, unit: .kilogramPerLitre)),
            clock: .none
        )
    )

    // TaiDoc (Diamond Mobile Mini DM30b) firmware 1.2.4.
    // - "v1.2.4 has reversed sequence numbers and first item is last item and no clock access"; "diamond mini
    //   seems to make sequence 0 be the most recent record"; xDrip therefore asks only for the first record
    //   and invents a sequence from the timestamp (xDrip `BluetoothGlucoseMeter.java`, manufacturer starting
    //   "TaiDoc"). Sequence 0 being always the newest means that a new record takes 0 and every stored
    //   number goes up by one (`MeterQuirks.Numbering.newestFirst`); that shift is inferred from the
    //   evidence, not seen in a capture.
    // - No clock characteristic at all, no Glucose Measurement Context (same file).
    // Unverified: the model string, the advertised name.
    public static let taiDocReversed = MeterProfile(
        name: "taidoc-reversed",
        summary: "TaiDoc DM30b firmware 1.2.4: sequence numbers run backwards (0 = newest), no clock, no context",
        evidence: "xDrip BluetoothGlucoseMeter.java (TaiDoc: reversed sequence, no clock, no context)",
        meter: MeterDescription(
            address: "00:1C:05:00:00:06",
            name: "TAIDOC TD4255",
            passkey: 123456,
            deviceInformation: DeviceInformation(manufacturer: "TaiDoc Technology", model: "DM30b", serial: "4255000123",
                                                 firmware: "1.2.4"),
            hasContextCharacteristic: false,
            records: renumbered(MeterSeries.records(count: 10, firstSequence: 0, start: start, intervalMinutes: 240,
                                                    timeOffset: nil, unit: .kilogramPerLitre), .newestFirst),
            clock: .none,
            quirks: MeterQuirks(numbering: .newestFirst)
        )
    )

    // A meter that follows the Glucose Profile 1.0.1 and Device Information 1.1 exactly: what the
    // gateway is written against.
    public static let genericGLS = MeterProfile(
        name: "generic-gls",
        summary: "A meter that follows the Glucose Profile exactly (context, Current Time Service)",
        evidence: "Bluetooth Glucose Profile 1.0.1 and Glucose Service 1.0.1",
        meter: MeterDescription(
            address: "C0:FF:EE:00:00:07",
            name: "meter+00000007",
            passkey: 123456,
            records: MeterSeries.records(count: 10, firstSequence: 1, start: start, intervalMinutes: 240,
                                         timeOffset: nil, unit: .kilogramPerLitre, withContext: true),
            clock: MeterClock(kind: .currentTime)
        )
    )

    // MARK: - Records

    /// Ordinary readings plus one below and one above the range, and one just inside its lower end.
    static func rangeRecords(low: Double, high: Double, timeOffset: Int16?, withContext: Bool) -> [MeterRecord] {
        var records = MeterSeries.records(count: 10, firstSequence: 1, start: start, intervalMinutes: 240,
                                          timeOffset: timeOffset, unit: .kilogramPerLitre, withContext: withContext)
        let last = records.last?.baseTime ?? start
        func next(_ i: Int, _ result: MeterRecord.Result) -> MeterRecord {
            MeterRecord(sequenceNumber: UInt16(10 + i), baseTime: last.adding(minutes: 240 * i), timeOffset: timeOffset,
                        result: result)
        }
        records.append(next(1, .mgPerDL(low)))     // the lowest value the meter shows as a number
        records.append(next(2, .low))              // below `low`
        records.append(next(3, .high))             // above `high`
        records.append(next(4, .mgPerDL(high)))    // the highest value it shows as a number
        return records
    }

    /// Ten readings; record 5 is sent with month 13, record 8 is a ketone result (context meal 6).
    static func careSensRecords() -> [MeterRecord] {
        var records = MeterSeries.records(count: 10, firstSequence: 1, start: start, intervalMinutes: 240,
                                          timeOffset: nil, unit: .kilogramPerLitre)
        if let i = records.firstIndex(where: { $0.sequenceNumber == 8 }) {
            var c = GlucoseMeasurementContext(sequenceNumber: 8)
            c.meal = 6
            records[i].context = c
            records[i].result = .mgPerDL(12)   // 1.2 mmol/L ketone
        }
        return records
    }

    /// The records of a full memory followed by the bogus HI dated 2037 the meter adds.
    public static func withMemoryFullMarker(_ records: [MeterRecord]) -> [MeterRecord] {
        let next = (records.map(\.sequenceNumber).max() ?? 0) &+ 1
        return records + [MeterRecord(sequenceNumber: next, baseTime: time(2037, 1, 1, 0, 0), result: .high)]
    }

    /// Gives records (in chronological order) the numbers the meter would: `newestFirst` makes the newest 0.
    public static func renumbered(_ chronological: [MeterRecord], _ numbering: MeterQuirks.Numbering) -> [MeterRecord] {
        switch numbering {
        case .oldestFirst:
            return chronological
        case .newestFirst:
            let n = chronological.count
            return chronological.enumerated().map { i, r in
                var r = r
                r.sequenceNumber = UInt16(truncatingIfNeeded: n - 1 - i)
                r.context?.sequenceNumber = r.sequenceNumber
                return r
            }
        }
    }
}
