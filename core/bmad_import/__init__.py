"""Import a BMAD v6 source tree (`src/`) or an installed `_bmad/` folder as one `.bmad` v1.1 package.

Entry point: `import_bmad(path, overrides)` returns the package files and the import report;
`write_package` puts them on disk (a directory or a `.bmad`/`.zip` archive).
"""

from .importer import BmadImportError, ImportResult, import_bmad
from .report import ImportReport
from .writer import OutputExists, write_package

__all__ = ["BmadImportError", "ImportReport", "ImportResult", "import_bmad", "OutputExists", "write_package"]
