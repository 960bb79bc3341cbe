import GatewayCore
import GlucoseProfile
import Support
import SyncEngine
import TestSupport
import Transport

/// An outbox of `count` synthetic readings (`TestSupport.syntheticReading`), queued for Nightscout unless told.
func filledStore(_ count: Int, builders: [any OutboxBodyBuilder] = [NightscoutBodyBuilder()]) async -> FakeOutboxStore {
    await filledOutbox(count, builders: builders)
}
