"""Minimal setup.py that reads nbdev's settings.ini (nbdev's template needs pkg_resources, gone from current setuptools)."""
from configparser import ConfigParser
from setuptools import setup, find_packages

cfg = ConfigParser(delimiters=['='])
cfg.read('settings.ini', encoding='utf-8')
c = cfg['DEFAULT']
req = c.get('requirements', '').split()
dev = c.get('dev_requirements', '').split()
tb = c.get('tensorboard_requirements', '').split()   # optional extra: --tensorboard true
scripts = [s.strip() for s in c.get('console_scripts', '').split('\n') if s.strip()]

setup(
    name=c['lib_name'], version=c['version'], description=c['description'],
    author=c['author'], author_email=c['author_email'], license=c['license'],
    url=c['git_url'], python_requires=f">={c['min_python']}",
    packages=find_packages(include=[c['lib_path'], c['lib_path'] + '.*']),
    package_data={c['lib_path']: ['papers/*.csv', 'papers/*.md']},   # the papers' tables (fedloge_nb/papers/) ship with the package
    install_requires=req, extras_require={'dev': dev, 'tensorboard': tb},
    entry_points={'console_scripts': scripts, 'nbdev': [f"{c['lib_path']}={c['lib_path']}._modidx:d"]},
    long_description=open('README.md', encoding='utf-8').read(), long_description_content_type='text/markdown',
    zip_safe=False,
)
