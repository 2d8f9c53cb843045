"""Write README.md from nbs/index.ipynb (nbdev's readme notebook). nbdev_readme needs quarto, which this project does not install."""
import json
from pathlib import Path

root = Path(__file__).resolve().parents[1]
nb = json.loads((root / 'nbs' / 'index.ipynb').read_text())
parts = [''.join(c['source']) if c['cell_type'] == 'markdown' else '```python\n' + ''.join(c['source']) + '\n```' for c in nb['cells']]
text = '\n\n'.join(parts).replace('# fedloge_nb\n\n> ', '# fedloge_nb\n\n', 1)
text = text.replace('](../', '](')   # the notebook links from nbs/, the README from the repository root
(root / 'README.md').write_text('<!-- generated from nbs/index.ipynb by scripts/make_readme.py: edit the notebook -->\n' + text + '\n')
