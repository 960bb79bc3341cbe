import GatewayCore
@testable import SyncEngine
import Testing
import TestSupport
@testable import Transport

/// The reconnection waits (on the manual clock), the inbound packet guard, and the names of TLS failures.
@Suite("MQTT connection rules")
struct MQTTConnectionRulesTests {
    @Test func aBrokerThatDropsEachConnectionIsAskedLessAndLessOften() {
        let clock = ManualClock()
        var backoff = ReconnectBackoff()
        var waits: [Duration] = []
        for _ in 0..<10 {
            backoff.connected(at: clock.now)
            clock.advance(by: .milliseconds(50))  // CONNACK 0, closed 50 ms later
            let wait = backoff.ended(at: clock.now, refused: false)
            waits.append(wait)
            clock.advance(by: wait)
        }
        #expect(waits == [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16),
                          .seconds(30), .seconds(30), .seconds(30), .seconds(30)])
        #expect(backoff.flapping)
    }

    @Test func aConnectionThatHeldAMinuteStartsTheWaitsAgain() {
        let clock = ManualClock()
        var backoff = ReconnectBackoff()
        for _ in 0..<5 {
            backoff.connected(at: clock.now)
            clock.advance(by: .seconds(1))
            _ = backoff.ended(at: clock.now, refused: false)
        }
        #expect(backoff.next == .seconds(16))
        backoff.connected(at: clock.now)
        clock.advance(by: .seconds(59))
        let early = backoff.holds(at: clock.now)
        #expect(!early)
        clock.advance(by: .seconds(1))
        let held = backoff.holds(at: clock.now)
        #expect(held)
        #expect(!backoff.flapping)
        let wait = backoff.ended(at: clock.now, refused: false)
        #expect(wait == .milliseconds(500))
    }

    @Test func failedAttemptsWithoutAConnectionDoubleAndARefusalWaitsLong() {
        let clock = ManualClock()
        var backoff = ReconnectBackoff()
        let waits = [backoff.ended(at: clock.now, refused: false), backoff.ended(at: clock.now, refused: false),
                     backoff.ended(at: clock.now, refused: true)]
        #expect(waits == [.milliseconds(500), .seconds(1), .seconds(30)])
        #expect(!backoff.flapping)
    }

    struct Packet: CustomTestStringConvertible, Sendable {
        var name: String
        var bytes: [UInt8]
        var refused: Bool
        var testDescription: String { name }
    }

    @Test(arguments: [
        Packet(name: "CONNACK", bytes: [0x20, 0x02, 0x00, 0x00], refused: false),
        Packet(name: "CONNACK then PUBACK then PINGRESP", bytes: [0x20, 0x02, 0x00, 0x00, 0x40, 0x02, 0x00, 0x07, 0xD0, 0x00], refused: false),
        Packet(name: "a PUBACK cut short", bytes: [0x40, 0x02, 0x00], refused: false),
        Packet(name: "a 60 MB PUBLISH", bytes: [0x30, 0x80, 0x80, 0xCE, 0x1C], refused: true),
        Packet(name: "a PUBLISH header cut short", bytes: [0x30, 0xFF], refused: true),
        Packet(name: "a tiny PUBLISH", bytes: [0x30, 0x05, 0x00, 0x01, 0x61, 0x62, 0x63], refused: true),
        Packet(name: "PUBACK then a PUBLISH", bytes: [0x40, 0x02, 0x00, 0x01, 0x32, 0x80, 0x80, 0x80, 0x10], refused: true),
        Packet(name: "a CONNACK announcing 1 MB", bytes: [0x20, 0x80, 0x80, 0x40], refused: true),
        Packet(name: "a SUBSCRIBE", bytes: [0x82, 0x02, 0x00, 0x01], refused: true),
    ])
    func inboundPackets(_ p: Packet) {
        #expect((InboundGuard.problem(p.bytes) != nil) == p.refused)
    }

    @Test func tlsFailuresAreNamed() {
        let verifyFailed = "OpenSSL Error[0]: error:0A000086:SSL routines::certificate verify failed"
        #expect(TLSFailure.cause(logLine: verifyFailed, verifyResult: 10)?.contains("expired") == true)
        #expect(TLSFailure.cause(logLine: verifyFailed, verifyResult: 20)?.contains("unknown CA") == true)
        #expect(TLSFailure.cause(logLine: verifyFailed, verifyResult: 18)?.contains("unknown CA") == true)
        #expect(TLSFailure.cause(logLine: "Error: host name verification failed.", verifyResult: 0)?.contains("host name") == true)
        #expect(TLSFailure.cause(logLine: "OpenSSL Error[0]: error:0A00010B:SSL routines::wrong version number", verifyResult: 0)?
            .contains("did not answer with TLS") == true)
        #expect(TLSFailure.cause(logLine: "Client sending CONNECT", verifyResult: -1) == nil)
    }
}
