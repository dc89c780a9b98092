// lmcore/upgrade/notebook.h — the code cells of a Jupyter notebook (.ipynb, nbformat 4), as Python
// text upgrade-check can tokenize.
//
//   upgrade::Notebook nb = upgrade::read_notebook(json_text);   // throws lmcore::Error if not a notebook
//   for (std::size_t i = 0; i < nb.code.size(); ++i) check(nb.code[i], nb.cell_number[i]);
//
// IPython syntax is not Python: line magics and shell escapes (`%time x`, `!pip install ...`), help
// (`obj?`) and cell magics (`%%bash`) are blanked to spaces of the same length, so line and column
// numbers inside a cell stay those of the cell's own text. `%%time`, `%%timeit`, `%%capture` and
// `%%prun` cells keep their Python body. Shell lines are kept in `shell_lines` for the CUDA pin
// checks (`!pip install torch --index-url .../cu121`). --fix edits the JSON text in place through
// `raw_offset` (the notebook is not re-serialized, so its formatting is kept byte for byte).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lmcore::upgrade {

struct NotebookShellLine {
  int cell = 0;  // 1-based cell number in the notebook (markdown cells count)
  int line = 0;  // 1-based line in the cell
  int col = 0;   // 0-based character offset of the text within the line
  std::string text;
};

struct Notebook {
  std::vector<std::string> code;  // Python text of each code cell, magics blanked
  std::vector<int> cell_number;   // 1-based position of that cell among all cells
  std::vector<NotebookShellLine> shell_lines;
  // Per code cell: the byte offset in the .ipynb text of each byte of `code` (plus one past the
  // end), so a rename inside a cell becomes an edit of the JSON text that leaves every other byte
  // alone. Empty for a cell whose source could not be located byte for byte (then it is not fixed).
  std::vector<std::vector<std::uint32_t>> raw_offset;
};

// Maps a byte range [begin, end) of code cell `index` to the .ipynb text; false when the range is
// not a run of unescaped bytes there (only such ranges are rewritten).
bool notebook_raw_range(const Notebook& nb, std::size_t index, std::uint32_t& begin, std::uint32_t& end);

Notebook read_notebook(std::string_view json_text);

}  // namespace lmcore::upgrade
