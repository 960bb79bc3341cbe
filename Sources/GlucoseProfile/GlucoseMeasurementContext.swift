/// Unit of the Medication field of 0x2A34 (flags bit 5).
public enum MedicationUnit: String, Sendable, Hashable, CaseIterable {
    case kilograms = "kg"
    case litres = "L"
}

/// Glucose Measurement Context, characteristic 0x2A34 (GLS 1.0.1 §3.3): optional details of the record
/// with the same sequence number. Fields in wire order:
///
///     Flags                         uint8
///     Sequence Number               uint16
///     Extended Flags                uint8 (all bits reserved)      if flags bit 7 (comes first!)
///     Carbohydrate ID               uint8                           if flags bit 0
///     Carbohydrate                  SFLOAT, kilograms               if flags bit 0
///     Meal                          uint8                           if flags bit 1
///     Tester-Health                 uint8: tester low nibble,       if flags bit 2
///                                   health high nibble
///     Exercise Duration             uint16, seconds (0xFFFF overrun) if flags bit 3
///     Exercise Intensity            uint8, percent                  if flags bit 3
///     Medication ID                 uint8                           if flags bit 4
///     Medication                    SFLOAT, kg (bit 5 = 0) or litres (bit 5 = 1)  if flags bit 4
///     HbA1c                         SFLOAT, percent                 if flags bit 6
///
/// Amounts are SI: 90 g of carbohydrate is 0.09 kg (`5A D0`). Unknown enumeration values are kept raw.
/// Fields the flags pair together are encoded together: a missing partner is sent as 0 (identifiers,
/// nibbles, intensity, duration) or NaN (SFLOAT amounts).
public struct GlucoseMeasurementContext: Hashable, Sendable {
    public static let uuid: UInt16 = 0x2A34

    public var sequenceNumber: UInt16
    public var extendedFlags: UInt8?
    /// 1 breakfast, 2 lunch, 3 dinner, 4 snack, 5 drink, 6 supper, 7 brunch.
    public var carbohydrateID: UInt8?
    public var carbohydrateKg: SFloat?
    /// 1 preprandial, 2 postprandial, 3 fasting, 4 casual, 5 bedtime (6 marks ketone on i-SENS meters).
    public var meal: UInt8?
    /// 1 self, 2 health care professional, 3 lab test, 15 not available.
    public var tester: UInt8?
    /// 1 minor issues, 2 major issues, 3 during menses, 4 under stress, 5 no health issues, 15 not available.
    public var health: UInt8?
    public var exerciseDurationSeconds: UInt16?
    public var exerciseIntensityPercent: UInt8?
    /// 1 rapid-acting insulin, 2 short-acting, 3 intermediate-acting, 4 long-acting, 5 pre-mixed.
    public var medicationID: UInt8?
    /// Medication amount in `medicationUnit`.
    public var medication: SFloat?
    public var medicationUnit: MedicationUnit
    public var hba1cPercent: SFloat?

    public init(
        sequenceNumber: UInt16, extendedFlags: UInt8? = nil, carbohydrateID: UInt8? = nil,
        carbohydrateKg: SFloat? = nil, meal: UInt8? = nil, tester: UInt8? = nil, health: UInt8? = nil,
        exerciseDurationSeconds: UInt16? = nil, exerciseIntensityPercent: UInt8? = nil,
        medicationID: UInt8? = nil, medication: SFloat? = nil, medicationUnit: MedicationUnit = .kilograms,
        hba1cPercent: SFloat? = nil
    ) {
        self.sequenceNumber = sequenceNumber
        self.extendedFlags = extendedFlags
        self.carbohydrateID = carbohydrateID
        self.carbohydrateKg = carbohydrateKg
        self.meal = meal
        self.tester = tester
        self.health = health
        self.exerciseDurationSeconds = exerciseDurationSeconds
        self.exerciseIntensityPercent = exerciseIntensityPercent
        self.medicationID = medicationID
        self.medication = medication
        self.medicationUnit = medicationUnit
        self.hba1cPercent = hba1cPercent
    }

    @inlinable
    public init(bytes: some Collection<UInt8>) throws(GlucoseDecodingError) {
        self = try GlucoseMeasurementContext.decode(bytes).get()
    }

    /// Decodes without throwing: the value or the typed error.
    @inlinable
    public static func decode(_ bytes: some Collection<UInt8>) -> Result<GlucoseMeasurementContext, GlucoseDecodingError> {
        withContiguousBytes(bytes, decode(raw:))
    }

    @usableFromInline
    static func decode(raw: UnsafeRawBufferPointer) -> Result<GlucoseMeasurementContext, GlucoseDecodingError> {
        var r = ByteReader(raw)
        let flags = r.uint8("Flags")
        var value = GlucoseMeasurementContext(sequenceNumber: r.uint16("Sequence Number"))
        value.medicationUnit = flags & 0x20 != 0 ? .litres : .kilograms
        if flags & 0x80 != 0 { value.extendedFlags = r.uint8("Extended Flags") }
        if flags & 0x01 != 0 {
            value.carbohydrateID = r.uint8("Carbohydrate ID")
            value.carbohydrateKg = r.sfloat("Carbohydrate")
        }
        if flags & 0x02 != 0 { value.meal = r.uint8("Meal") }
        if flags & 0x04 != 0 {
            let testerHealth = r.uint8("Tester-Health")
            value.tester = testerHealth & 0x0F
            value.health = testerHealth >> 4
        }
        if flags & 0x08 != 0 {
            value.exerciseDurationSeconds = r.uint16("Exercise Duration")
            value.exerciseIntensityPercent = r.uint8("Exercise Intensity")
        }
        if flags & 0x10 != 0 {
            value.medicationID = r.uint8("Medication ID")
            value.medication = r.sfloat("Medication")
        }
        if flags & 0x40 != 0 { value.hba1cPercent = r.sfloat("HbA1c") }
        return r.result(value)
    }

    private var hasCarbohydrate: Bool { carbohydrateID != nil || carbohydrateKg != nil }
    private var hasTesterHealth: Bool { tester != nil || health != nil }
    private var hasExercise: Bool { exerciseDurationSeconds != nil || exerciseIntensityPercent != nil }
    private var hasMedication: Bool { medicationID != nil || medication != nil }

    /// Flags derived from the fields.
    public var flags: UInt8 {
        var flags: UInt8 = 0
        if hasCarbohydrate { flags |= 0x01 }
        if meal != nil { flags |= 0x02 }
        if hasTesterHealth { flags |= 0x04 }
        if hasExercise { flags |= 0x08 }
        if hasMedication { flags |= 0x10 }
        if medicationUnit == .litres { flags |= 0x20 }
        if hba1cPercent != nil { flags |= 0x40 }
        if extendedFlags != nil { flags |= 0x80 }
        return flags
    }

    public func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: 17)
        w.uint8(flags)
        w.uint16(sequenceNumber)
        if let extendedFlags { w.uint8(extendedFlags) }
        if hasCarbohydrate {
            w.uint8(carbohydrateID ?? 0)
            w.sfloat(carbohydrateKg ?? .nan)
        }
        if let meal { w.uint8(meal) }
        if hasTesterHealth { w.uint8(((health ?? 0) & 0x0F) << 4 | ((tester ?? 0) & 0x0F)) }
        if hasExercise {
            w.uint16(exerciseDurationSeconds ?? 0)
            w.uint8(exerciseIntensityPercent ?? 0)
        }
        if hasMedication {
            w.uint8(medicationID ?? 0)
            w.sfloat(medication ?? .nan)
        }
        if let hba1cPercent { w.sfloat(hba1cPercent) }
        return w.bytes
    }
}
