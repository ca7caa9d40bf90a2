"""The bundled data sets read without sklearn.datasets are the arrays sklearn.datasets gives."""

import numpy as np
from sklearn.datasets import load_diabetes, load_digits

from lab.data import bundled


def test_digits_as_load_digits():
    images, labels = bundled.digits()
    expected = load_digits()
    np.testing.assert_array_equal(images, expected.images)
    np.testing.assert_array_equal(labels, expected.target)


def test_diabetes_as_load_diabetes():
    features, target = bundled.diabetes()
    expected = load_diabetes(scaled=False)
    np.testing.assert_array_equal(features, expected.data)
    np.testing.assert_array_equal(target, expected.target)
    assert expected.feature_names == bundled.DIABETES_FEATURES
