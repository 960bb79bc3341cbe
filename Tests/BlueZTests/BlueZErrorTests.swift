import Testing
import DBusKit
import GatewayCore
import TestSupport
@testable import BlueZ

@Suite struct BlueZErrorTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var message: String
        var kind: BlueZError.Kind
        var att: UInt8? = nil
        var testDescription: String { "\(name) \(message)" }
    }

    static let cases: [Case] = [
        Case(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local", kind: .transient),
        Case(name: "org.bluez.Error.Failed", message: "Software caused connection abort", kind: .transient),
        Case(name: "org.bluez.Error.Failed", message: "br-connection-canceled", kind: .transient),
        Case(name: "org.bluez.Error.InProgress", message: "In Progress", kind: .transient),
        Case(name: "org.bluez.Error.NotReady", message: "Resource Not Ready", kind: .transient),
        Case(name: "org.bluez.Error.Failed", message: "le-connection-key-missing", kind: .permanent),
        Case(name: "org.bluez.Error.NotPermitted", message: "Not paired", kind: .permanent),
        Case(name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed", kind: .permanent),
        Case(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist", kind: .notFound),
        Case(name: "org.freedesktop.DBus.Error.UnknownObject", message: "Method \"Connect\" doesn't exist", kind: .notFound),
        Case(name: "org.bluez.Error.NotConnected", message: "Not Connected", kind: .disconnected),
        Case(name: "org.bluez.Error.NotSupported", message: "Operation is not supported", kind: .notSupported),
        Case(name: "org.freedesktop.DBus.Error.NoReply", message: "Did not receive a reply", kind: .timeout),
        Case(name: "org.freedesktop.DBus.Error.Disconnected", message: "gone", kind: .disconnected),
        Case(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0x80", kind: .permanent, att: 0x80),
        Case(name: "org.bluez.Error", message: "Operation failed with ATT error: 0x81", kind: .permanent, att: 0x81),
        Case(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0xZZ", kind: .permanent),
    ]

    @Test(arguments: cases)
    func classification(_ c: Case) {
        let error = BlueZError(DBusError(name: c.name, message: c.message))
        #expect(error.kind == c.kind)
        #expect(error.name == c.name)
        #expect(error.message == c.message)
        #expect(error.attError == c.att)
        #expect(error.meterLinkError.attError == c.att)
    }

    @Test func backoffDoublesUpToTheCap() {
        let retry = ConnectRetry(initial: .milliseconds(250), maximum: .seconds(1), attempts: 6)
        #expect((1...5).map { retry.delay(before: $0) } == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(1), .seconds(1)])
    }
}

@Suite struct PairingFailureTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var message: String
        /// Seconds since the agent gave the passkey; nil: never asked.
        var answeredAgo: Double?
        var failure: PairingFailure
        var testDescription: String { "\(name) \(message), passkey \(answeredAgo.map { "\($0) s ago" } ?? "never asked")" }
    }

    static let cases: [Case] = [
        Case(name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed", answeredAgo: 0.4, failure: .wrongPasskey),
        Case(name: "org.bluez.Error.AuthenticationRejected", message: "Authentication Rejected", answeredAgo: 1, failure: .wrongPasskey),
        // A refusal 34 s after the passkey: SMP timed out, the PIN was never judged.
        Case(name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed", answeredAgo: 34, failure: .noAnswer),
        Case(name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed", answeredAgo: nil, failure: .refused),
        Case(name: "org.bluez.Error.AuthenticationCanceled", message: "Authentication Canceled", answeredAgo: 0.5, failure: .noAnswer),
        Case(name: "org.bluez.Error.AuthenticationTimeout", message: "Authentication Timeout", answeredAgo: nil, failure: .noAnswer),
        Case(name: "org.bluez.Error.ConnectionAttemptFailed", message: "Page Timeout", answeredAgo: nil, failure: .noAnswer),
        Case(name: "org.freedesktop.DBus.Error.NoReply", message: "Did not receive a reply", answeredAgo: 2, failure: .noAnswer),
        Case(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local", answeredAgo: nil, failure: .noAnswer),
        Case(name: "org.bluez.Error.NotReady", message: "Resource Not Ready", answeredAgo: nil, failure: .adapterNotReady),
        Case(name: "org.bluez.Error.InProgress", message: "In Progress", answeredAgo: nil, failure: .busy),
        Case(name: "org.bluez.Error.InvalidArguments", message: "Invalid arguments in method call", answeredAgo: nil, failure: .other),
    ]

    @Test(arguments: cases)
    func onlyARefusalRightAfterThePasskeyIsAWrongPin(_ c: Case) {
        let error = BlueZError(DBusError(name: c.name, message: c.message))
        let ago = c.answeredAgo.map { Duration.milliseconds(Int64($0 * 1000)) }
        #expect(PairingFailure.classify(name: error.name, kind: error.kind, passkeyAnsweredAgo: ago) == c.failure)
    }
}
