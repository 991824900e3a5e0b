"""The one way Ferry's commands print: a rich ``Console`` that never interprets text.

File names, paths, reasons and errors come from users and upstream systems; a NAS file named
``flights_2016-01-31[red]:x:.csv`` must print as exactly that. Rich would read ``[red]`` as markup
and ``:x:`` as an emoji code, so every console here has markup, emoji and highlighting off;
colour is given with ``style=`` on the whole line or column, never inside the text.
"""

from __future__ import annotations

from rich.console import Console


def literal_console(width: int | None = None, **kwargs: object) -> Console:
    """A ``Console`` that prints every string literally (no markup, no emoji codes, no
    highlighting), in table cells too. ``width`` in columns; ``None`` = the terminal's."""
    return Console(
        markup=False,
        emoji=False,
        highlight=False,
        width=width,
        **kwargs,  # type: ignore[arg-type]
    )


__all__ = ["literal_console"]
