"""What a run leaves: results.json and its summary, reproduce.sh, the HTML report, compare,
and the exports CI systems read (JUnit, KCIDB, GitHub annotations)."""
