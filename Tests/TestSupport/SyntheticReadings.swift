import GatewayCore
import GlucoseProfile

/// The meter of the synthetic readings below.
public let testMeter: MeterInfo = {
    var m = MeterInfo(address: "00:60:19:01:0E:92", timeZone: "Europe/Berlin")
    m.model = "CareSens"
    m.serial = "1234ABCD"
    m.manufacturer = "i-SENS"
    return m
}()

/// Reading n of a synthetic meter memory: one every 5 minutes from 2026-01-01 08:00 local (+01:00).
public func syntheticReading(_ n: Int, mgdl: Double = 100) -> NewReading {
    let base: Int64 = 1_767_250_800_000  // 2026-01-01T07:00:00Z
    let instant = base + Int64(n) * 300_000
    let local = GlucoseDateTime(naiveSeconds: instant / 1000 + 3600)
    return NewReading(
        meterAddress: testMeter.address, sequence: n, baseTime: local, timeOffsetMinutes: 0, userFacingTime: local,
        utcOffsetMinutes: 60,
        meterInstant: instant, instant: instant, mgdl: mgdl + Double(n % 50), mmoll: nil, special: nil, unit: .kilogramPerLitre,
        type: 1, sampleLocation: 1, sensorStatus: nil, analyte: .glucose, context: nil, rawMeasurement: [],
        rawContext: nil, receivedAt: instant, exclusion: nil)
}

/// An outbox holding the first `count` synthetic readings, queued with `builders`.
public func filledOutbox(_ count: Int, builders: [any OutboxBodyBuilder]) async -> FakeOutboxStore {
    let store = FakeOutboxStore()
    for n in 0..<count {
        await store.enqueue(syntheticReading(n), meter: testMeter, builders: builders, createdAt: Int64(n))
    }
    return store
}
