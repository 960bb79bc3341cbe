import Gateway
import Support
import SyncEngine
import Testing

@testable import GatewayCLI

/// The config as the upload engine sees it: `GatewayConfig.upload`, the enabled destinations of the
/// sections the sync engine read.
@Suite struct ConfigMappingTests {
    static func config(_ text: String) -> GatewayConfig {
        let (config, problems) = ConfigLoader.evaluate(bytes: Array(text.utf8), path: "/nonexistent-dir/gw.toml")
        #expect(problems == [])
        return config
    }

    @Test func defaultsHaveNoDestinationAndDefaultRecovery() {
        let settings = GatewayConfig().upload
        #expect(settings.nightscout == nil)
        #expect(settings.fhir == nil)
        #expect(settings.recovery == RecoverySettings())
        #expect(settings.destinations.isEmpty)
    }

    @Test func everyUploadKeyIsCarriedOver() {
        let settings = Self.config("""
        [nightscout]
        url = "https://ns.example/"
        api_secret = "0123456789abcdef"
        [fhir]
        enabled = true
        base_url = "https://fhir.example/r4"
        subject = "Patient/42"
        bearer_token = "tok"
        [network]
        retry_count = 7
        network_timeout_ms = 1500
        health_check_url = "http://probe.example/ok"
        recovery_mode = false
        error_bypass = true
        on_network_error = ["/bin/echo", "it's down", "plain"]
        """).upload
        #expect(settings.nightscout == SyncEngine.NightscoutSettings(url: "https://ns.example", apiSecret: Support.Secret("0123456789abcdef")))
        #expect(settings.fhir == SyncEngine.FHIRSettings(baseURL: "https://fhir.example/r4", subject: "Patient/42", token: Support.Secret("tok")))
        #expect(settings.recovery == RecoverySettings(
            retryCount: 7, networkTimeoutMs: 1500, healthCheckURL: "http://probe.example/ok",
            recoveryMode: false, errorBypass: true, onNetworkError: "/bin/echo 'it'\\''s down' plain"
        ))
        #expect(settings.destinations == [.nightscout, .fhir])
    }

    @Test func tokenAndDisabledDestinations() {
        let settings = Self.config("""
        [nightscout]
        url = "https://ns.example"
        token = "reader-abc"
        [fhir]
        base_url = "https://fhir.example/r4"
        subject = "Patient/42"
        """).upload
        #expect(settings.nightscout?.token == Support.Secret("reader-abc"))
        #expect(settings.nightscout?.apiSecret == nil)
        #expect(settings.fhir == nil)  // [fhir] defaults to disabled
        let off = Self.config("[nightscout]\nenabled = false\nurl = \"https://ns.example\"\n").upload
        #expect(off.nightscout == nil)
    }

    @Test func shellQuotingSurvivesTheShell() {
        #expect(ShellWords.command(["/usr/bin/logger", "-t", "gw"]) == "/usr/bin/logger -t gw")
        #expect(ShellWords.command(["/x", "a b", "", "$HOME", "q'uote"]) == "/x 'a b' '' '$HOME' 'q'\\''uote'")
    }
}
