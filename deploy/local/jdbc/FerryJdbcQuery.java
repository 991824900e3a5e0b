// A JDBC client for HiveServer2, run with Java's source launcher (no build step):
//
//   java -cp "$SPARK_HOME/jars/*" FerryJdbcQuery.java <jdbc-url> <user> <timeout-s> <sql> [<sql> ...]
//
// For each statement it prints, on stdout, one JSON line per result: first
// {"columns":[{"name":..,"type":..,"precision":..,"scale":..}, ...]} as the driver's
// ResultSetMetaData reports them, then one JSON array per row (values as strings, null as null),
// then {"end":<rows>}. A statement without a result set prints {"updated":<count>}.
// Errors: one line "FERRY_JDBC_ERROR <first line of the message>" on stderr, exit 1 (SQL error),
// or exit 2 (usage). Used by ferry.clusters.hiveserver2.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;

public class FerryJdbcQuery {
    static String json(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
            }
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) {
        if (args.length < 4) {
            System.err.println("usage: FerryJdbcQuery <jdbc-url> <user> <timeout-s> <sql>...");
            System.exit(2);
        }
        DriverManager.setLoginTimeout(Integer.parseInt(args[2]));
        try (Connection conn = DriverManager.getConnection(args[0], args[1], "");
             Statement st = conn.createStatement()) {
            st.setQueryTimeout(Integer.parseInt(args[2]));
            for (int a = 3; a < args.length; a++) {
                if (!st.execute(args[a])) {
                    System.out.println("{\"updated\":" + st.getUpdateCount() + "}");
                    continue;
                }
                try (ResultSet rs = st.getResultSet()) {
                    ResultSetMetaData md = rs.getMetaData();
                    int n = md.getColumnCount();
                    StringBuilder head = new StringBuilder("{\"columns\":[");
                    for (int i = 1; i <= n; i++) {
                        if (i > 1) head.append(',');
                        head.append("{\"name\":").append(json(md.getColumnName(i)))
                            .append(",\"type\":").append(json(md.getColumnTypeName(i)))
                            .append(",\"precision\":").append(md.getPrecision(i))
                            .append(",\"scale\":").append(md.getScale(i)).append('}');
                    }
                    System.out.println(head.append("]}"));
                    long rows = 0;
                    while (rs.next()) {
                        StringBuilder row = new StringBuilder("[");
                        for (int i = 1; i <= n; i++) {
                            if (i > 1) row.append(',');
                            row.append(json(rs.getString(i)));
                        }
                        System.out.println(row.append(']'));
                        rows++;
                    }
                    System.out.println("{\"end\":" + rows + "}");
                }
            }
        } catch (SQLException e) {
            // The server's message may carry its whole stack trace: its first line says what failed.
            String msg = String.valueOf(e.getMessage()).split("\\R", 2)[0];
            System.err.println("FERRY_JDBC_ERROR " + msg);
            System.exit(1);
        }
    }
}
