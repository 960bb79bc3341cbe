import GatewayCore
import Support
import Testing
import TestSupport
@testable import Meters

/// Each way pairing can fail has its own one-line message and exit status; none quotes a PIN.
@Suite struct PairingFailureMessageTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var kind: MeterAccessError.Kind
        var status: Support.ExitStatus
        var says: String
        var testDescription: String { says }
    }

    static let cases: [Case] = [
        Case(kind: .authenticationFailed, status: .failure, says: "wrong PIN"),
        Case(kind: .pairingRefused, status: .failure, says: "refused or cancelled the pairing"),
        Case(kind: .passkeyNeeded, status: .usage, says: "needs the PIN the meter shows"),
        Case(kind: .confirmationNeeded, status: .usage, says: "--confirm"),
        Case(kind: .numbersDiffer, status: .failure, says: "the numbers did not match"),
        Case(kind: .rejectedOnMeter, status: .failure, says: "the meter did not accept the numbers"),
        Case(kind: .timeout, status: .unavailable, says: "did not answer in time"),
    ]

    @Test(arguments: cases) func oneLineAndItsOwnStatus(_ c: Case) {
        let failure = MeterPairing.failure(MeterAccessError(c.kind, "org.bluez.Error.AuthenticationFailed"),
                                           address: "C0:26:DA:01:02:03", step: "pairing")
        #expect(failure.status == c.status)
        #expect(failure.message.contains(c.says))
        #expect(!failure.message.contains("\n"))
        let others = Self.cases.filter { $0.kind != c.kind }
        #expect(others.allSatisfy { !failure.message.contains($0.says) || $0.says == "--confirm" })
    }

    @Test func pairingWithNoPinDoesNotGuessOne() async throws {
        let (meter, radio, store) = MeterPairingTests.setup()
        let pairing = MeterPairing(radio: radio, store: store, logger: .silent)
        let error = await #expect(throws: GatewayFailure.self) {
            try await pairing.run(address: meter.address, input: PairingInput(passkey: nil), timeZone: "UTC")
        }
        #expect(error?.status == .usage)
        #expect(!radio.isPaired(meter.address))
        #expect(try await store.meter(meter.address) == nil)
    }
}
