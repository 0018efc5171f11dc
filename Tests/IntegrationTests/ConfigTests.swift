import Foundation
import Logging
import Relay
import Testing
import TodoStore

@testable import todostreamd

#if canImport(Glibc)
import Glibc
#endif

#if canImport(Glibc)
import Glibc
#endif

@Suite struct ConfigTests {
    static let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("config/todostreamd.yaml").path

    func resolve(_ yaml: String?, environment: [String: String] = [:], flags: [String] = []) throws -> DaemonOptions {
        var arguments = flags
        if let yaml {
            let path = NSTemporaryDirectory() + "config-\(UUID().uuidString).yaml"
            try Data(yaml.utf8).write(to: URL(fileURLWithPath: path))
            arguments += ["--config", path]
        }
        return try SettingsOptions.parse(arguments).resolve(environment: environment)
    }

    func message(_ yaml: String?, environment: [String: String] = [:], flags: [String] = []) -> String? {
        do {
            _ = try resolve(yaml, environment: environment, flags: flags)
            return nil
        } catch {
            return "\(error)"
        }
    }

    /// `--rate-limit` sets the burst to twice the rate; a rate so large that twice it does not
    /// fit is refused by the range check, not a crash.
    @Test func theRateLimitFlagSetsTheBurstAndAHugeOneIsOutOfRange() throws {
        let options = try resolve(nil, flags: ["--rate-limit", "50"])
        #expect(options.relay.rateLimitBurst == 100)
        let huge = message(nil, flags: ["--rate-limit", "\(Int.max)"])
        #expect(huge?.contains("--rate-limit is \(Int.max), out of range") == true)
    }

    /// A rate whose burst (twice it) would be out of range gets the largest burst, and a rate
    /// out of range is named with the number given, not its burst's.
    @Test func theRateLimitFlagsBurstStaysInItsRange() throws {
        let options = try resolve(nil, flags: ["--rate-limit", "6000000"])
        #expect(options.relay.rateLimitPerSecond == 6_000_000)
        #expect(options.relay.rateLimitBurst == 10_000_000)
        #expect(
            message(nil, flags: ["--rate-limit", "20000000"]) == "--rate-limit is 20000000, out of range 1...10000000"
        )
        #expect(message(nil, flags: ["--rate-limit", "0"]) == "--rate-limit is 0, out of range 1...10000000")
    }

    /// A YAML null is no value: a section whose keys are all commented out sets nothing; a
    /// setting left null is an error naming it (as text, `data_dir: ~` was a directory `~`).
    @Test func aNullSectionIsEmptyAndANullSettingIsAnError() throws {
        let commented = try resolve("limits:\n  # max_frame_bytes: 1024\nstore:\n")
        #expect(commented.relay.maxFrameBytes == (try resolve(nil)).relay.maxFrameBytes)
        for null in ["~", "null", "NULL", ""] {
            let problem = message("data_dir: \(null)\n")
            #expect(
                problem?.hasSuffix(
                    ": data_dir has no value (~, null or nothing after the colon): give one, or leave it out for its default"
                ) == true,
                "\(problem ?? "nil")"
            )
        }
        #expect(message("tls:\n  cert: ~\n")?.contains("tls.cert has no value") == true)
        #expect(
            message("limits:\n  max_frame_bytes: !!null \"\"\n")?.contains("limits.max_frame_bytes has no value")
                == true
        )
        let emptyToken = message("auth:\n  tokens:\n    - role: view\n      token:\n")
        #expect(
            emptyToken?.hasSuffix("auth.tokens[0].token has no value (~, null or nothing after the colon)") == true,
            "\(emptyToken ?? "nil")"
        )
        // Quoted, it is the text.
        #expect(message("log_level: \"null\"\n")?.contains("log_level must be one of") == true)
    }

    /// A setting given both in its section and in the dotted form is refused, not taken at
    /// random from the two.
    @Test func aSettingGivenTwiceIsRefused() {
        let problem = message("limits.max_frame_bytes: 1024\nlimits:\n  max_frame_bytes: 2048\n")
        #expect(problem?.hasSuffix(": limits.max_frame_bytes is given twice") == true, "\(problem ?? "nil")")
        // Twice in one section: the line of the second (it named the section's first line).
        #expect(
            message("log_level: info\nlimits:\n  max_frame_bytes: 1024\n  # a comment\n  max_frame_bytes: 2048\n")?
                .hasSuffix("a key given twice (max_frame_bytes) at line 5") == true
        )
        #expect(message("log_level: info\nlog_level: debug\n")?.hasSuffix("(log_level) at line 2") == true)
    }

    /// A config file that cannot be read says why.
    @Test func anUnreadableConfigFileSaysWhy() throws {
        #expect(
            message(nil, flags: ["--config", "/nonexistent/todostreamd.yaml"])
                == "cannot read config file /nonexistent/todostreamd.yaml: no such file"
        )
        let directory = NSTemporaryDirectory()
        #expect(
            message(nil, flags: ["--config", directory]) == "cannot read config file \(directory): it is a directory"
        )
        // No settings at all: the defaults.
        #expect(message(nil, flags: ["--config", "/dev/null"]) == nil)
        let path = NSTemporaryDirectory() + "config-\(UUID().uuidString).yaml"
        try Data([0xFF, 0xFE, 0x00]).write(to: URL(fileURLWithPath: path))
        #expect(message(nil, flags: ["--config", path]) == "cannot read config file \(path): it is not UTF-8 text")
    }

    @Test func theShippedExampleHoldsExactlyTheDefaults() throws {
        let fromFile = try SettingsOptions.parse(["--config", Self.example]).resolve(environment: [:])
        var defaults = try SettingsOptions.parse([]).resolve(environment: [:])
        defaults.configPath = Self.example
        #expect(fromFile.relay == defaults.relay)
        #expect(fromFile.listeners == defaults.listeners)
        #expect(fromFile.retention == defaults.retention)
        #expect(fromFile.maxBatch == defaults.maxBatch)
        #expect(fromFile.sequencerSpinMicroseconds == defaults.sequencerSpinMicroseconds)
        #expect(fromFile.dataDirectory == defaults.dataDirectory)
        #expect(fromFile.tlsCloseTimeout == defaults.tlsCloseTimeout)
        #expect(fromFile.tokens.isEmpty)
        // Installed for the unit as it is: the data goes where systemd says.
        let underSystemd = try SettingsOptions.parse(["--config", Self.example])
            .resolve(environment: ["STATE_DIRECTORY": "/var/lib/todostream"])
        #expect(underSystemd.dataDirectory == "/var/lib/todostream")
    }

    @Test func everyKeyIsDocumentedInTheExample() throws {
        let text = try String(contentsOfFile: Self.example, encoding: .utf8)
        for key in ConfigFile.keys.keys {
            let leaf = String(key.split(separator: ".").last ?? "")
            #expect(text.contains(leaf + ":"), "config/todostreamd.yaml does not mention \(key)")
        }
    }

    @Test func unknownKeysAndBadValuesNameTheKey() {
        #expect(message("limit:\n  max_frame_bytes: 1000\n")?.contains("unknown key limit") == true)
        #expect(message("limits:\n  max_frame_byte: 1000\n")?.contains("unknown key limits.max_frame_byte") == true)
        #expect(message("limits: 5\n")?.contains("limits must be a section") == true)
        #expect(
            message("limits:\n  max_frame_bytes: 10\n")?.contains("limits.max_frame_bytes is 10, out of range") == true
        )
        #expect(
            message("limits:\n  max_frame_bytes: lots\n")?.contains("limits.max_frame_bytes must be a whole number")
                == true
        )
        // A whole number too large for any setting is out of its range, in the file and in
        // the environment (it was "not a whole number").
        #expect(
            message("limits:\n  max_frame_bytes: 99999999999999999999999\n")?.contains(
                "limits.max_frame_bytes is 99999999999999999999999, out of range 256...1048576"
            ) == true
        )
        #expect(
            message(nil, environment: ["TODOSTREAM_LIMITS_MAX_FRAME_BYTES": "-99999999999999999999"])
                == "TODOSTREAM_LIMITS_MAX_FRAME_BYTES is -99999999999999999999, out of range 256...1048576"
        )
        #expect(
            message(nil, environment: ["TODOSTREAM_LIMITS_MAX_FRAME_BYTES": "12x"])
                == "TODOSTREAM_LIMITS_MAX_FRAME_BYTES must be a whole number"
        )
        #expect(message("storage: paper\n")?.contains("storage must be one of") == true)
        // A bad value names the file it is in, as a bad key does.
        #expect(message("storage: paper\n")?.contains(".yaml: storage must be one of") == true)
        #expect(message("listen:\n  tcp: nowhere\n")?.contains("listen.tcp must be HOST:PORT or off") == true)
        #expect(
            message("auth:\n  tokens:\n    - role: admin\n      token: abcdefghij\n")?.contains(
                "role must be view or monitor"
            ) == true
        )
        #expect(message(": : :\n")?.contains("not valid YAML") == true)
        // Unquoted digits are a number in YAML, not a token: refused, not dropped.
        let digits = String(repeating: "0", count: 64)
        #expect(
            message("auth:\n  tokens:\n    - role: view\n      token_sha256: \(digits)\n")?.contains(
                "auth.tokens[0].token_sha256 must be a string (quote it)"
            ) == true
        )
        #expect(
            message("auth:\n  tokens:\n    - role: view\n      token: 123456789\n")?.contains(
                "auth.tokens[0].token must be a string (quote it)"
            ) == true
        )
        #expect(
            message("auth:\n  tokens:\n    - role: view\n      token: abcdefghij\n      token_sha256: \"\(digits)\"\n")?
                .contains("needs exactly one of token or token_sha256") == true
        )
    }

    /// A certificate outside its dates is said to be: expired, or not valid yet; and the
    /// development certificate of an earlier start is made again once it would expire.
    @Test func certificatesOutsideTheirDatesAreNamedAndTheDevelopmentOneRenewed() throws {
        let directory = temporaryDirectory()
        let expired = try DevCertificate.generate(now: Date().addingTimeInterval(-400 * 86_400))
        let path = directory + "/expired.pem"
        try Data(expired.certificate.utf8).write(to: URL(fileURLWithPath: path))
        #expect(Daemon.certificateDateProblem(path)?.contains("expired on") == true)
        let later = try DevCertificate.generate(now: Date().addingTimeInterval(86_400))
        let futurePath = directory + "/later.pem"
        try Data(later.certificate.utf8).write(to: URL(fileURLWithPath: futurePath))
        #expect(Daemon.certificateDateProblem(futurePath)?.contains("is not valid until") == true)
        let fresh = try DevCertificate.ensure(in: directory)
        #expect(Daemon.certificateDateProblem(fresh.certificatePath) == nil)
        #expect(try DevCertificate.ensure(in: directory).fingerprint == fresh.fingerprint, "kept while valid")
        // An expired one in the data dir, as a year on: made again.
        try Data(expired.certificate.utf8).write(to: URL(fileURLWithPath: fresh.certificatePath))
        try Data(expired.key.utf8).write(to: URL(fileURLWithPath: fresh.keyPath))
        let renewed = try DevCertificate.ensure(in: directory)
        #expect(renewed.fingerprint != fresh.fingerprint)
        #expect(Daemon.certificateDateProblem(renewed.certificatePath) == nil)
    }

    /// A TLS file that cannot be used is named, with what is wrong with it in plain words.
    @Test func tlsFilesThatCannotBeUsedAreNamedInPlainWords() throws {
        let one = try DevCertificate.ensure(in: temporaryDirectory())
        let other = try DevCertificate.ensure(in: temporaryDirectory())
        let garbage = temporaryDirectory() + "/garbage.pem"
        try Data("not pem\n".utf8).write(to: URL(fileURLWithPath: garbage))
        func problem(_ certificate: String, _ key: String, _ clientCA: String? = nil) -> String? {
            do {
                _ = try Daemon.makeTLSContext(
                    certificatePath: certificate,
                    keyPath: key,
                    clientCAPath: clientCA,
                    closeTimeout: .seconds(1)
                )
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(problem(one.certificatePath, one.keyPath) == nil)
        #expect(
            problem(one.certificatePath, other.keyPath)?.hasSuffix("the key does not match the certificate") == true
        )
        // A chain whose server certificate is not first: the message says where it must be.
        let reversed = temporaryDirectory() + "/reversed.pem"
        let ownAndOther =
            try String(contentsOfFile: other.certificatePath, encoding: .utf8) + "\n"
            + String(contentsOfFile: one.certificatePath, encoding: .utf8)
        try Data(ownAndOther.utf8).write(to: URL(fileURLWithPath: reversed))
        #expect(
            problem(reversed, one.keyPath)?.hasSuffix(
                "the key does not match the certificate (the first in the file: the server's own must come first, then its intermediates)"
            ) == true,
            "\(problem(reversed, one.keyPath) ?? "accepted")"
        )
        #expect(problem("/nowhere.pem", one.keyPath) == "cannot load TLS certificate /nowhere.pem: no such file")
        #expect(problem(garbage, one.keyPath) == "cannot load TLS certificate \(garbage): it holds no PEM certificate")
        #expect(problem(one.certificatePath, garbage) == "cannot load TLS key \(garbage): it holds no PEM private key")
        #expect(
            problem(one.certificatePath, one.keyPath, garbage)
                == "cannot load TLS client CA \(garbage): it holds no PEM certificate"
        )
    }

    /// Found by the config-file fuzz target: a key that is not a plain name crashed the YAML
    /// loader. Such files, alias bombs, deep nesting and huge files are errors now.
    @Test func yamlThatIsNotPlainKeysAndValuesIsAnErrorNotACrash() {
        #expect(message("? [a, b]\n: 1\n")?.contains("every key must be a plain name") == true)
        #expect(message("limits: {[max_frame_bytes]: 1000}\n")?.contains("every key must be a plain name") == true)
        var bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        for level in 1...9 {
            bomb +=
                "a\(level): &a\(level) [" + Array(repeating: "*a\(level - 1)", count: 10).joined(separator: ", ")
                + "]\n"
        }
        #expect(message(bomb)?.contains("more than") == true)
        let deep = "limits: " + String(repeating: "[", count: 40) + String(repeating: "]", count: 40) + "\n"
        #expect(message(deep)?.contains("nests deeper than") == true)
        let huge = "# " + String(repeating: "x", count: ConfigFile.maxBytes) + "\n"
        #expect(message(huge)?.contains("larger than") == true)
        // Also found by the fuzz target: a base-60 integer that overflows trapped in Yams.
        #expect(message("limits:\n  max_frame_bytes: 37337337337337:4:37:4:4\n")?.contains("whole number") == true)
        #expect(message("limits:\n  max_frame_bytes: 99999999999999999999\n")?.contains("out of range") == true)
        #expect(message("limits:\n  max_frame_bytes: 1000\n") == nil, "a plain file still reads")
        #expect(message("store:\n  sequencer_spin_us: 100001\n")?.contains("store.sequencer_spin_us") == true)
        #expect((try? resolve("store:\n  sequencer_spin_us: 0\n"))?.sequencerSpin == .zero)
        #expect((try? resolve(nil))?.sequencerSpin == .microseconds(400))
        #expect(
            (try? resolve(nil, flags: ["--storage", "postgres", "--postgres-url", "postgres://a@b/c"]))?.sequencerSpin
                == .zero
        )
        #expect(
            (try? resolve(
                "store:\n  sequencer_spin_us: 50\n",
                flags: ["--storage", "postgres", "--postgres-url", "postgres://a@b/c"]
            ))?.sequencerSpin == .microseconds(50)
        )
        #expect((try? resolve(nil))?.offloadHandOver == false, "SQLite hands over on the sequencer's thread")
        #expect(
            (try? resolve(nil, flags: ["--storage", "postgres", "--postgres-url", "postgres://a@b/c"]))?.offloadHandOver
                == true
        )
        #expect(
            (try? resolve(
                "store:\n  sequencer_handover_thread: false\n",
                flags: ["--storage", "postgres", "--postgres-url", "postgres://a@b/c"]
            ))?.offloadHandOver == false
        )
        #expect(
            message("store:\n  sequencer_handover_thread: 3\n")?.contains("store.sequencer_handover_thread") == true
        )
        #expect((try? resolve(nil))?.sqliteCacheKiB == 2000)
        #expect((try? resolve("store:\n  sqlite_cache_kib: 512\n"))?.sqliteCacheKiB == 512)
        #expect(message("store:\n  sqlite_cache_kib: 63\n")?.contains("store.sqlite_cache_kib") == true)
        #expect((try? resolve("store:\n  sqlite_deferred_todos: 0\n"))?.sqliteDeferredTodos == 0)
        #expect((try? resolve(""))?.sqliteDeferredTodos == GroupCommitStore.defaultSQLiteDeferredTodos)
        #expect(message("store:\n  sqlite_deferred_todos: -1\n")?.contains("store.sqlite_deferred_todos") == true)
        #expect((try? resolve(nil))?.sqlitePageBytes == 8192)
        #expect((try? resolve("store:\n  sqlite_page_bytes: 4096\n"))?.sqlitePageBytes == 4096)
        #expect((try? resolve("store:\n  sqlite_page_bytes: 65536\n"))?.sqlitePageBytes == 65536)
        #expect(message("store:\n  sqlite_page_bytes: 6000\n")?.contains("not a power of two") == true)
        #expect(message("store:\n  sqlite_page_bytes: 256\n")?.contains("store.sqlite_page_bytes") == true)
        #expect(message("store:\n  sqlite_page_bytes: 131072\n")?.contains("store.sqlite_page_bytes") == true)
        #expect(message("limits:\n  max_frame_bytes: +1000\n") == nil)
        #expect(message("listen:\n  http: off\ntls:\n  dev: Yes\n") == nil, "YAML 1.1 booleans still read")
        #expect(message("limits:\n  max_frame_bytes: \"1000\"\n")?.contains("whole number") == true, "quoted is text")
    }

    @Test func postgresNeedsAValidURLAndNamesTheKey() throws {
        #expect(message("storage: postgres\n")?.contains("postgres_url") == true)
        #expect(
            message(nil, flags: ["--storage", "postgres", "--postgres-url", "postgres://a:hunter22@b/c?sslmode=maybe"])
                .map { $0.contains("postgres_url") && $0.contains("sslmode") && !$0.contains("hunter22") } == true
        )
        #expect(message("postgres:\n  pool_size: 0\n")?.contains("postgres.pool_size is 0, out of range") == true)
        let options = try resolve(
            "storage: postgres\npostgres:\n  catch_up_interval_ms: 250\n  staging_cache_todos: 0\n  commit_follow_grace_us: 500\n",
            environment: ["TODOSTREAM_POSTGRES_URL": "postgres://todo@db/todos"]
        )
        #expect(options.storage == .postgres)
        #expect(options.postgresURL == "postgres://todo@db/todos")
        #expect(options.postgres.catchUpInterval == .milliseconds(250))
        #expect(options.postgres.stagingGuesses == 0)
        #expect(options.postgres.commitFollowGrace == .microseconds(500))
        #expect(try resolve("postgres:\n  pool_size: 4\n").postgres.stagingGuesses == 16_384)
        #expect(
            message("postgres:\n  staging_cache_todos: -1\n")?.contains(
                "postgres.staging_cache_todos is -1, out of range"
            )
                == true
        )
        let flagged = try resolve(nil, flags: ["--storage", "postgres", "--postgres-url", "postgres://x@y/z"])
        #expect(flagged.postgresURL == "postgres://x@y/z")
    }

    @Test func environmentOverridesTheFileAndFlagsOverrideBoth() throws {
        let yaml = "limits:\n  max_queue_bytes: 2048\n  max_connections: 10\n"
        let options = try resolve(
            yaml,
            environment: ["TODOSTREAM_LIMITS_MAX_QUEUE_BYTES": "4096", "TODOSTREAM_LIMITS_MAX_CONNECTIONS": "20"],
            flags: ["--max-connections", "30"]
        )
        #expect(options.relay.maxQueueBytes == 4096)
        #expect(options.relay.maxConnections == 30)
        #expect(
            message(nil, environment: ["TODOSTREAM_LIMITS_MAX_QUEUE_BYTES": "many"])?.contains(
                "TODOSTREAM_LIMITS_MAX_QUEUE_BYTES"
            ) == true
        )
        #expect(message(nil, flags: ["--max-frame-bytes", "5"])?.contains("--max-frame-bytes") == true)
    }

    /// A boolean from the environment is read as the file's YAML reads one: `on` and `off` too.
    @Test func environmentBooleansReadAsTheFilesDo() throws {
        let key = "TODOSTREAM_TLS_HTTP"
        for (text, expected) in [("on", true), ("YES", true), ("1", true), ("off", false), ("no", false)] {
            let options = try resolve("tls:\n  dev: true\n", environment: [key: text])
            #expect(options.listeners.httpTLS == expected, "\(text)")
        }
        #expect(message(nil, environment: [key: "maybe"])?.contains("\(key) must be true or false") == true)
    }

    @Test func tokensAreKeptHashedAndMakeAuthRequired() throws {
        let digest = TokenEntry.digest("monitor-secret")
        let options = try resolve(
            "auth:\n  tokens:\n    - role: view\n      token: view-secret-1\n    - role: monitor\n      token_sha256: \(digest)\n"
        )
        let auth = options.auth
        #expect(auth.required)
        #expect(auth.role(for: "view-secret-1") == .view)
        #expect(auth.role(for: "monitor-secret") == .monitor)
        #expect(auth.role(for: "nope") == nil)
        #expect(!auth.digests.keys.contains("view-secret-1"))
    }

    @Test func plainTextToTheNetworkWithoutTokensIsRefusedUnlessAllowed() throws {
        #expect(message("listen:\n  tcp: 0.0.0.0:7878\n")?.contains("allow_insecure") == true)
        _ = try resolve("allow_insecure: true\nlisten:\n  tcp: 0.0.0.0:7878\n")
        _ = try resolve(
            "listen:\n  tcp: 0.0.0.0:7878\nauth:\n  tokens:\n    - role: view\n      token: long-enough-token\n"
        )
        _ = try resolve("listen:\n  tcp: 127.0.0.1:7878\n")
    }

    /// A file that is not YAML is named with the problem and where it is, never with its
    /// text: the lines around a mistake, or the whole document, may hold tokens.
    @Test func yamlErrorsSayWhereWithoutQuotingTheFile() throws {
        let secret = "SUPERSECRET-token"
        let broken = [
            "auth:\n  tokens:\n    - role: view\n      token: \"\(secret)\": x\n",
            "auth:\n  tokens:\n    - role: view\n      token: \"\(secret)\n",
            "log_level: info\nlog_level: debug\nauth:\n  tokens:\n    - role: view\n      token: \"\(secret)\"\n",
        ]
        for yaml in broken {
            let error = try #require(message(yaml))
            #expect(error.contains("is not valid YAML"), "\(error)")
            #expect(error.contains("line "), "\(error)")
            #expect(!error.contains(secret), "\(error)")
        }
    }

    /// A reload names the settings it cannot change live, and keeps their running values:
    /// the journal's bounds and the store's tuning as well as listeners and storage.
    @Test func aReloadNamesAndKeepsWhatOnlyARestartChanges() throws {
        let current = try resolve("journal:\n  max_entries: 1000\n")
        var next = try resolve("journal:\n  max_entries: 50\nstore:\n  max_batch: 64\nlog_level: debug\n")
        #expect(Reloader.restartOnlyChanges(from: current, to: next) == ["journal", "store"])
        Reloader.keepRestartOnly(of: current, in: &next)
        #expect(Reloader.restartOnlyChanges(from: current, to: next).isEmpty)
        #expect(next.retention.maxEntries == 1000)
        #expect(next.logLevel == "debug", "what changes live still does")
        let moved = try resolve("journal:\n  max_entries: 1000\nlisten:\n  tcp: 127.0.0.1:7999\n")
        #expect(Reloader.restartOnlyChanges(from: current, to: moved) == ["listen"])
    }

    /// A reload is judged with the listeners that stay running: one that moves a public
    /// plain-text listener to loopback (a restart-only change) and drops the view tokens would
    /// leave the running public listener open to anyone, so it is refused.
    @Test func aReloadIsCheckedWithTheListenersThatStayRunning() throws {
        let token = "auth:\n  tokens:\n    - role: view\n      token: \"a-view-token\"\n"
        let current = try resolve("listen:\n  tcp: 0.0.0.0:7999\n  http: off\n" + token)
        var next = try resolve("listen:\n  tcp: 127.0.0.1:7999\n  http: off\n")
        #expect(throws: ConfigError.self) { try Reloader.keepingRestartOnly(of: current, in: &next) }
        do {
            _ = try Reloader.keepingRestartOnly(of: current, in: &next)
        } catch {
            #expect("\(error)".contains("refusing to listen on 0.0.0.0:7999 in plain text without a view token"))
            #expect("\(error)".contains("with the running listen settings"))
        }
        // With a view token, or with nothing restart-only changed, it is applied.
        var withToken = try resolve("listen:\n  tcp: 127.0.0.1:7999\n  http: off\n" + token)
        #expect(try Reloader.keepingRestartOnly(of: current, in: &withToken) == ["listen"])
        #expect(withToken.listeners.tcp?.host == "0.0.0.0")
        var same = try resolve("listen:\n  tcp: 0.0.0.0:7999\n  http: off\nlog_level: debug\n" + token)
        #expect(try Reloader.keepingRestartOnly(of: current, in: &same).isEmpty)
    }

    /// What `serve` would refuse, `check-config` refuses too: both resolve the same way.
    @Test func settingsServeWouldRefuseAreRefusedWhenResolved() throws {
        let devOutside = message("listen:\n  tls: 0.0.0.0:7443\ntls:\n  dev: true\n")
        #expect(devOutside?.contains("tls.dev (--dev-tls) is for development on loopback only") == true)
        _ = try resolve("listen:\n  tls: 127.0.0.1:7443\ntls:\n  dev: true\n")
        #expect(message("data_dir: \"\"\n")?.contains("data_dir (--data-dir) is empty") == true)
        #expect(
            message("listen:\n  tcp: 127.0.0.1:9000\n  http: 127.0.0.1:9000\n")?
                .contains("listen.tcp and listen.http are both on port 9000") == true
        )
        #expect(
            message("listen:\n  tcp: 0.0.0.0:9000\n  http: 127.0.0.1:9000\n")?.contains("both on port 9000") == true
        )
        _ = try resolve("listen:\n  tcp: 127.0.0.1:0\n  http: 127.0.0.1:0\n")
        _ = try resolve("listen:\n  tcp: 127.0.0.1:9000\n  http: 127.0.0.2:9000\n")
    }

    /// The flags keep the config file's rule: an empty or short token (`"$UNSET_VAR"`) would
    /// let anyone authenticate with it.
    @Test func tokensFromFlagsAreAtLeastEightCharacters() throws {
        #expect(message(nil, flags: ["--monitor-token", ""])?.contains("--monitor-token must be at least 8") == true)
        #expect(message(nil, flags: ["--monitor-token", "1234567"])?.contains("at least 8") == true)
        #expect(message(nil, flags: ["--token", "view:ab"])?.contains("--token: the token must be at least 8") == true)
        #expect(message(nil, flags: ["--token", "monitor:"])?.contains("ROLE:TOKEN") == true)
        _ = try resolve(nil, flags: ["--monitor-token", "12345678", "--token", "view:abcdefgh"])
    }

    /// One token under two roles took the last one given: listed as view and then as monitor,
    /// it left no view token, so authentication was off (even on a public listener).
    @Test func aTokenGivenTwoRolesIsRefused() throws {
        let twice =
            "auth:\n  tokens:\n    - role: view\n      token: same-token-1\n    - role: monitor\n      token: same-token-1\n"
        #expect(message(twice)?.contains("the same token is given two roles") == true)
        #expect(
            message(
                nil,
                flags: ["--listen", "0.0.0.0:7878", "--token", "view:abcdefghijk", "--monitor-token", "abcdefghijk"]
            )?
            .contains("two roles") == true
        )
        // The same token twice with one role is only a repetition.
        _ = try resolve(nil, flags: ["--token", "view:abcdefghijk", "--token", "view:abcdefghijk"])
    }

    @Test func aMonitorTokenAloneDoesNotOpenThePlainListener() throws {
        // Only a view token makes clients authenticate; a monitor token leaves every view open.
        let refused = message(nil, flags: ["--listen", "0.0.0.0:7878", "--monitor-token", "monitor-secret"])
        #expect(refused?.contains("view token") == true)
        #expect(
            message(
                "listen:\n  tcp: 0.0.0.0:7878\nauth:\n  tokens:\n    - role: monitor\n      token: long-enough-token\n"
            )?
            .contains("allow_insecure") == true
        )
        #expect(
            message(
                nil,
                environment: ["TODOSTREAM_LISTEN_HTTP": "0.0.0.0:8080"],
                flags: ["--token", "monitor:abcdefgh1"]
            )?
            .contains("view token") == true
        )
        _ = try resolve(nil, flags: ["--listen", "0.0.0.0:7878", "--token", "view:abcdefgh1"])
        _ = try resolve(
            nil,
            flags: ["--listen", "0.0.0.0:7878", "--monitor-token", "monitor-secret", "--allow-insecure"]
        )
    }

    @Test func everyWayAroundTheExposureCheckIsRefused() throws {
        // Host names that only look like loopback, the wildcard in every spelling, and IPv6.
        for host in ["127.example.com", "127.0.0.1.nip.io", "0.0.0.0", "0", "[::]", "::", "10.0.0.1", "[fe80::1]"] {
            #expect(
                message(nil, flags: ["--listen", "\(host):7878", "--http-listen", "off"]) != nil,
                "\(host) was taken for loopback"
            )
        }
        // The HTTP listener counts as much as the NDJSON one, unless it has TLS.
        #expect(message(nil, flags: ["--http-listen", "0.0.0.0:8080"])?.contains("0.0.0.0:8080") == true)
        // Real loopback in its spellings is fine.
        for host in ["127.0.0.1", "127.1.2.3", "localhost", "[::1]"] {
            _ = try resolve(nil, flags: ["--listen", "\(host):7878", "--http-listen", "off"])
        }
        #expect(Daemon.isLoopback("::ffff:127.0.0.1"))
        #expect(!Daemon.isLoopback("127.0.0.256"))
        #expect(!Daemon.isLoopback("127.0.0"))
    }

    @Test func aSocketFromTheServiceManagerIsJudgedByItsRealAddress() throws {
        // A socket bound to every address, inherited as `tcp`, while the config says loopback.
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(descriptor >= 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = INADDR_ANY
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        #expect(bound == 0)
        #expect(SocketActivation.boundHost(descriptor) == "0.0.0.0")
        var listeners = ListenerConfiguration(tcp: .init(host: "127.0.0.1", port: 7878), http: nil)
        SocketActivation.apply(["tcp": descriptor], to: &listeners)
        var options = DaemonOptions()
        options.listeners = listeners
        #expect(throws: ConfigError.self) { try options.validate() }
        options.allowInsecure = true
        try options.validate()
    }

    /// Descriptors passed by socket activation are taken only with `LISTEN_PID` naming this
    /// process, and only when each is a listening TCP socket named once: the daemon once served
    /// its own descriptors, a file, or an unbound socket as listeners (and crashed on them).
    @Test func socketActivationTakesOnlyListeningTCPSocketsMeantForThisProcess() throws {
        func tcpSocket(listening: Bool, type: Int32 = Int32(SOCK_STREAM.rawValue)) -> Int32 {
            let descriptor = socket(AF_INET, type, 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            if listening { _ = listen(descriptor, 8) }
            return descriptor
        }
        // Two descriptors side by side, as systemd passes them (3, 4, … in the daemon).
        let first: Int32 = 900
        func place(_ descriptors: [Int32]) {
            for (index, descriptor) in descriptors.enumerated() {
                _ = dup2(descriptor, first + Int32(index))
                close(descriptor)
            }
        }
        defer { for index in 0..<2 { close(first + Int32(index)) } }
        let pid = getpid()
        func take(_ names: String, pid given: Int32? = pid) throws -> [String: Int32] {
            var environment = ["LISTEN_FDS": "2", "LISTEN_FDNAMES": names]
            if let given { environment["LISTEN_PID"] = String(given) }
            return try SocketActivation.descriptors(environment: environment, pid: pid, first: first)
        }
        func refusal(_ names: String) -> String {
            do {
                return "taken: \(try take(names))"
            } catch {
                return "\(error)"
            }
        }
        place([tcpSocket(listening: true), tcpSocket(listening: true)])
        #expect(try take("tcp:http") == ["tcp": first, "http": first + 1])
        // Not for this process: without LISTEN_PID, or with another's.
        #expect(try take("tcp:http", pid: nil).isEmpty)
        #expect(try take("tcp:http", pid: pid + 1).isEmpty)
        #expect(refusal("tcp:tcp").contains("two descriptors are named tcp"))
        #expect(refusal("").contains("descriptor \(first) has no name"))
        #expect(refusal("tcp:").contains("descriptor \(first + 1) has no name"))
        // Not a listening TCP socket: each says which and why.
        func readEndOfAPipe() -> Int32 {
            var ends: [Int32] = [0, 0]
            _ = pipe(&ends)
            close(ends[1])
            return ends[0]
        }
        let notListening = "is not a listening TCP socket"
        place([tcpSocket(listening: false), readEndOfAPipe()])
        #expect(refusal("tcp:http").contains("descriptor \(first) (tcp) \(notListening): it does not listen"))
        place([tcpSocket(listening: true, type: Int32(SOCK_DGRAM.rawValue)), tcpSocket(listening: true)])
        #expect(refusal("tcp:http").contains("(tcp) \(notListening): it is not a stream socket"))
        place([tcpSocket(listening: true)])
        close(first + 1)
        #expect(refusal("tcp:http").contains("descriptor \(first + 1) (http) \(notListening): it is not open"))
        place([tcpSocket(listening: true), readEndOfAPipe()])
        #expect(refusal("tcp:http").contains("(http) \(notListening): it is not a socket"))
    }

    @Test func aPostgresURLMeansPostgres() throws {
        let url = "postgres://user:hunter22@db.example/todos"
        // With no storage setting, the URL selects PostgreSQL, from a flag, a file or the environment.
        #expect(try resolve(nil, flags: ["--postgres-url", url]).engine == .postgres)
        #expect(try resolve("postgres_url: \(url)\n").engine == .postgres)
        #expect(try resolve(nil, environment: ["TODOSTREAM_POSTGRES_URL": url]).engine == .postgres)
        #expect(try resolve(nil).engine == .sqlite)
        // With another engine named, it is an error that names both settings.
        for storage in ["sqlite", "memory"] {
            let refused = message(nil, environment: ["TODOSTREAM_POSTGRES_URL": url], flags: ["--storage", storage])
            #expect(refused?.contains("postgres_url") == true)
            #expect(refused?.contains("storage is \(storage)") == true)
            #expect(refused?.contains("hunter22") == false, "the password is never shown")
            #expect(message("storage: \(storage)\npostgres_url: \(url)\n")?.contains("storage is \(storage)") == true)
        }
    }

    @Test func aReloadWithABadConfigKeepsTheOldOne() async throws {
        let path = NSTemporaryDirectory() + "reload-\(UUID().uuidString).yaml"
        try Data("storage: memory\nlisten:\n  tcp: 127.0.0.1:0\n  http: off\nlimits:\n  max_subscriptions: 5\n".utf8)
            .write(to: URL(fileURLWithPath: path))
        let settings = try SettingsOptions.parse(["--config", path])
        let options = try settings.resolve(environment: [:])
        var logger = Logger(label: "t")
        logger.logLevel = .critical
        let daemon = try await Daemon.start(
            options,
            logger: logger,
            resolver: { try settings.resolve(environment: [:]) }
        )
        let running = Task { try await daemon.run() }
        #expect(daemon.relay.settings.configuration.maxSubscriptions == 5)
        try Data("storage: memory\nlisten:\n  tcp: 127.0.0.1:0\n  http: off\nlimits:\n  max_subscriptions: 7\n".utf8)
            .write(to: URL(fileURLWithPath: path))
        #expect(daemon.reload())
        #expect(daemon.relay.settings.configuration.maxSubscriptions == 7)
        // The log level changes live, for loggers already made too.
        let before = LogLevelControl.level
        defer { LogLevelControl.level = before }
        LogLevelControl.level = .info
        let existing = Logger(
            label: "made-before-the-reload",
            factory: { _ in ReloadableLogHandler(SwiftLogNoOpLogHandler()) }
        )
        #expect(existing.logLevel == .info)
        try Data(
            "storage: memory\nlog_level: debug\nlisten:\n  tcp: 127.0.0.1:0\n  http: off\nlimits:\n  max_subscriptions: 7\n"
                .utf8
        ).write(to: URL(fileURLWithPath: path))
        #expect(daemon.reload())
        #expect(existing.logLevel == .debug)
        try Data("limits:\n  max_subscriptions: -1\nlog_level: trace\n".utf8).write(to: URL(fileURLWithPath: path))
        #expect(daemon.reload() == false)
        #expect(daemon.relay.settings.configuration.maxSubscriptions == 7)
        #expect(existing.logLevel == .debug, "a refused reload changes nothing")
        await daemon.shutdown()
        try await running.value
    }
}
