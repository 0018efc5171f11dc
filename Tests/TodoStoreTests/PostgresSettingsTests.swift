import Testing

@testable import TodoStore

@Suite struct PostgresSettingsTests {
    @Test func parsesALibpqStyleURL() throws {
        let settings = try PostgresSettings(
            url: "postgres://todo:p%40ss@db.example.net:6543/todos?sslmode=verify-full&sslrootcert=/etc/ca.pem"
        )
        #expect(settings.host == "db.example.net")
        #expect(settings.port == 6543)
        #expect(settings.user == "todo")
        #expect(settings.password == "p@ss")
        #expect(settings.database == "todos")
        #expect(settings.tlsMode == .verifyFull)
        #expect(settings.rootCertificatePath == "/etc/ca.pem")
        #expect(settings.socketPath == nil)
    }

    @Test func defaultsFollowLibpq() throws {
        let settings = try PostgresSettings(url: "postgresql://todo@localhost")
        #expect(settings.port == 5432)
        #expect(settings.database == "todo")
        #expect(settings.tlsMode == .prefer)
        #expect(settings.password == nil)
    }

    @Test func aUnixSocketDirectory() throws {
        let settings = try PostgresSettings(url: "postgres://todo@/todos?host=/run/postgresql")
        #expect(settings.socketPath == "/run/postgresql/.s.PGSQL.5432")
        #expect(settings.tlsMode == .disable)
        let other = try PostgresSettings(url: "postgres://todo@/todos?host=/tmp/pg&port=5433")
        #expect(other.socketPath == "/tmp/pg/.s.PGSQL.5433")
    }

    @Test func theDescriptionNeverShowsThePassword() throws {
        let settings = try PostgresSettings(url: "postgres://todo:hunter22@db:5432/todos?sslmode=require")
        #expect(!settings.description.contains("hunter22"))
        #expect(settings.description.contains("db:5432/todos"))
    }

    @Test func mistakesAreExplainedWithoutThePassword() {
        func message(_ url: String) -> String? {
            do {
                _ = try PostgresSettings(url: url)
                return nil
            } catch {
                return error.message
            }
        }
        #expect(message("mysql://a@b/c")?.contains("postgres://") == true)
        #expect(message("postgres://a:hunter22@b/c?sslmode=sometimes")?.contains("sslmode=sometimes") == true)
        #expect(message("postgres://a:hunter22@b/c?sslmode=sometimes")?.contains("hunter22") == false)
        #expect(message("postgres://a@b/c?sslmode=verify-ca")?.contains("sslrootcert") == true)
        #expect(message("postgres://b/c")?.contains("no user") == true)
        #expect(message("postgres://a@b/c?colour=blue")?.contains("colour") == true)
    }

    @Test func bothEnginesShareTheSchemaVersioning() {
        #expect(PostgresMigrations.steps.count == Migrations.steps.count)
    }
}
