"""After a switch: the serving watch (crashes, hangs, external changes to units), the policies that act on
them, and the serving metrics window."""
