"""Class 8: crown itself by writing the validator's SQLite state DB (reached with sqlite3)."""
import sqlite3

from _attack import attempt, ctx


def crown(path):
    con = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
    con.execute("INSERT INTO crowns VALUES ('attacker-hotkey', 'rmsnorm')")
    con.commit()
    return "crowned"


attempt("state_db_write", lambda: crown(ctx()["state_db"]))
