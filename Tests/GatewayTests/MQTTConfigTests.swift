#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Support
import SyncEngine
import Testing
import TestSupport

@testable import Gateway

/// The `[mqtt]` section: URL forms, the password file, the topic prefix, and one-line problems that
/// never show the password.
@Suite struct MQTTConfigTests {
    @Test func aFullSectionLoads() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        try dir.write("mqtt.password", "broker-pass-4711\n", mode: 0o600)
        let path = try dir.write("gw.toml", """
        [mqtt]
        url = "mqtts://Broker.Example:8884/"
        username = "gw"
        password_file = "mqtt.password"
        topic_prefix = "home/glucose"
        discovery = false
        """)
        let config = try ConfigLoader.load(path: path)
        #expect(config.mqtt.enabled)
        #expect(config.mqtt.tls)
        #expect(config.mqtt.host == "broker.example")
        #expect(config.mqtt.port == 8884)
        #expect(config.mqtt.username == "gw")
        #expect(config.mqtt.password == Secret("broker-pass-4711", file: dir.path + "/mqtt.password"))
        #expect(config.mqtt.topicPrefix == "home/glucose")
        #expect(!config.mqtt.discovery)
        #expect(config.hasDestination)
        let summary = config.summaryLines()
        #expect(summary.contains("url: mqtts://broker.example:8884"))
        #expect(summary.contains("password: (set, from \(dir.path)/mqtt.password)"))
        #expect(!summary.joined().contains("broker-pass-4711"))
    }

    @Test func defaultPortsAndPrefix() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let plain = try ConfigLoader.load(path: try dir.write("a.toml", "[mqtt]\nurl = \"mqtt://127.0.0.1\"\n"))
        #expect(plain.mqtt.port == 1883)
        #expect(!plain.mqtt.tls)
        #expect(plain.mqtt.topicPrefix == "glucose-gateway")
        #expect(plain.mqtt.discovery)
        let tls = try ConfigLoader.load(path: try dir.write("b.toml", "[mqtt]\nurl = \"mqtts://[::1]\"\n"))
        #expect(tls.mqtt.port == 8883)
        #expect(tls.mqtt.host == "::1")
        #expect(tls.mqtt.url == "mqtts://[::1]:8883")
        let off = try ConfigLoader.load(path: try dir.write("c.toml", "[mqtt]\nenabled = false\nurl = \"mqtt://127.0.0.1\"\n"))
        #expect(!off.mqtt.enabled)
        #expect(!off.hasDestination)
    }

    struct BadCase: CustomTestStringConvertible, Sendable {
        var name: String
        var body: String
        var line: Int
        var words: String
        var testDescription: String { name }
    }

    @Test(arguments: [
        BadCase(name: "http URL", body: "url = \"http://broker:1883\"", line: 2, words: "expected an mqtt:// or mqtts:// URL"),
        BadCase(name: "credentials in the URL", body: "url = \"mqtt://gw:broker-pass-4711@broker\"", line: 2,
                words: "must not carry a user name or password"),
        BadCase(name: "a path", body: "url = \"mqtt://broker/topic\"", line: 2, words: "must not carry a path"),
        BadCase(name: "port out of range", body: "url = \"mqtt://broker:70000\"", line: 2, words: "invalid port"),
        BadCase(name: "enabled without url", body: "enabled = true", line: 2, words: "mqtt.url is required"),
        BadCase(name: "wildcard prefix", body: "url = \"mqtt://b\"\ntopic_prefix = \"home/#\"", line: 3, words: "no '+', '#'"),
        BadCase(name: "empty level", body: "url = \"mqtt://b\"\ntopic_prefix = \"home//g\"", line: 3, words: "'//'"),
        BadCase(name: "under the discovery prefix", body: "url = \"mqtt://b\"\ntopic_prefix = \"homeassistant/x\"", line: 3,
                words: "must not be under homeassistant/"),
        BadCase(name: "discovery not a boolean", body: "url = \"mqtt://b\"\ndiscovery = \"yes\"", line: 3, words: "expected true or false"),
        BadCase(name: "unknown key", body: "url = \"mqtt://b\"\npassword = \"broker-pass-4711\"", line: 3, words: "unknown key in [mqtt]"),
        BadCase(name: "password without username", body: "url = \"mqtt://b\"\npassword_file = \"pw\"", line: 3,
                words: "a password needs a username"),
        BadCase(name: "ca_file without TLS", body: "url = \"mqtt://b\"\nca_file = \"ca.pem\"", line: 3, words: "only used with an mqtts:// URL"),
    ])
    func badSectionsGiveOneLineNamingTheLine(_ c: BadCase) throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        try dir.write("pw", "broker-pass-4711", mode: 0o600)
        try dir.write("ca.pem", "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUAAAAAAAAAAAAAAAAAAAAAAAAAAAw\n-----END CERTIFICATE-----\n")
        let path = try dir.write("gw.toml", "[mqtt]\n" + c.body + "\n")
        let problems = ConfigLoader.check(path: path)
        #expect(problems.count == 1, "\(problems)")
        #expect(problems.first?.line == c.line)
        #expect(problems.first?.message.contains(c.words) == true, "\(problems)")
        #expect(problems.first?.message.contains("broker-pass-4711") == false)
        #expect(problems.first?.message.contains("\n") == false)
        #expect(problems.first?.section == "mqtt")
        do {
            _ = try ConfigLoader.load(path: path)
            Issue.record("loaded a bad [mqtt] section")
        } catch {
            #expect(error.status == .config)
            #expect(!error.message.contains("broker-pass-4711"))
        }
    }

    @Test func aPasswordFileOthersCanReadIsRefusedWithoutShowingIt() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        try dir.write("pw", "broker-pass-4711\n", mode: 0o644)
        let path = try dir.write("gw.toml", "[mqtt]\nurl = \"mqtt://b\"\nusername = \"gw\"\npassword_file = \"pw\"\n")
        let problems = ConfigLoader.check(path: path)
        #expect(problems.count == 1)
        #expect(problems.first?.line == 4)
        #expect(problems.first?.message.contains("accessible by group or others") == true)
        #expect(problems.first?.message.contains("broker-pass-4711") == false)
    }

    @Test func meterCommandsIgnoreABadMQTTSection() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = try dir.write("gw.toml", "[mqtt]\nurl = \"http://b\"\n")
        let (config, warning) = try ConfigLoader.loadIgnoringUploadProblems(explicitPath: path)
        #expect(!config.mqtt.enabled)
        #expect(warning?.contains("[mqtt] ignored by this command") == true)
    }
}
