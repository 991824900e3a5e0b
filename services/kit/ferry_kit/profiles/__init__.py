"""The local stack's settings profiles (``<name>.yaml``, chosen by ``FERRY_PROFILE``): overlays of
Ferry's settings for the stack's variants (``ha``, ``kerberos``, ``secure-kafka``, ``secure``,
``yarn``).

The product finds this directory through the ``ferry.profiles`` entry point group
(:func:`ferry.settings.sources.profile_dirs`).
"""

from pathlib import Path

#: The directory of the profile files.
DIRECTORY = Path(__file__).resolve().parent
