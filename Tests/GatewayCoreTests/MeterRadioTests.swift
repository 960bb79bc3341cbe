import GatewayCore
import Testing

@Suite("Meter radio")
struct MeterRadioTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var link: MeterLinkError.Kind
        var access: MeterAccessError.Kind
        var testDescription: String { "\(link) -> \(access)" }
    }

    /// A failed connect reads the same in `pair` and `sync` as it did when the commands' radio threw
    /// their error itself: no answer in time, not a meter, otherwise not reachable.
    @Test(arguments: [
        Case(link: .timeout, access: .timeout),
        Case(link: .notSupported, access: .notAMeter),
        Case(link: .transient, access: .notFound),
        Case(link: .permanent, access: .notFound),
        Case(link: .disconnected, access: .notFound),
    ])
    func connectFailureInTheCommandsTerms(_ c: Case) {
        let error = MeterAccessError(connecting: MeterLinkError(c.link, "le-connection-abort-by-local", attError: 0x0E))
        #expect(error.kind == c.access)
        #expect(error.message == "le-connection-abort-by-local")
    }
}
